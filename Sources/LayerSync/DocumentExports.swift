import CLayerSync
import LayerSyncCore
import LayerSyncModel

// "Document" section of include/layersync.h: thin calls into DocumentDescriptor.

/// Runs `body` with the descriptor behind `document`, translating errors.
func withDescriptor(
    _ document: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?,
    _ body: (DocumentDescriptor) throws(LayerSyncError) -> Void
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        try body(try DocumentHandle.from(document).descriptor)
    }
}

@c @implementation public func layersync_document_id(_ document: OpaquePointer?) -> UnsafePointer<CChar>? {
    DocumentHandle.optional(document).map { $0.documentIDCString.cString }
}

@c @implementation public func layersync_document_layer_name(_ document: OpaquePointer?) -> UnsafePointer<CChar>? {
    DocumentHandle.optional(document).map { $0.layerNameCString.cString }
}

@c @implementation public func layersync_document_user_id(
    _ document: OpaquePointer?, _ outUserID: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outUserID = try OutParameter.required(outUserID, "out_user_id")
        CString.store(descriptor.userID, in: outUserID)
    }
}

@c @implementation public func layersync_document_state(_ document: OpaquePointer?) -> layersync_document_state_t {
    let state = DocumentHandle.optional(document)?.descriptor.state ?? .invalid
    return layersync_document_state_t(rawValue: UInt32(state.rawValue))
}

@c @implementation public func layersync_document_listening_transport(_ document: OpaquePointer?) -> layersync_listening_transport_t {
    switch DocumentHandle.optional(document)?.descriptor.listeningTransport ?? .stream {
    case .stream: return LAYERSYNC_LISTENING_STREAM
    case .longPoll: return LAYERSYNC_LISTENING_LONG_POLL
    }
}

@c @implementation public func layersync_document_is_downloaded(_ document: OpaquePointer?) -> Bool {
    DocumentHandle.optional(document)?.descriptor.isDownloaded ?? false
}

@c @implementation public func layersync_document_has_unsynced_changes(_ document: OpaquePointer?) -> Bool {
    DocumentHandle.optional(document)?.descriptor.hasUnsyncedChanges ?? false
}

@c @implementation public func layersync_document_last_sync_time(_ document: OpaquePointer?) -> Double {
    DocumentHandle.optional(document)?.descriptor.lastSyncTime ?? 0
}

@c @implementation public func layersync_document_pdf_path(
    _ document: OpaquePointer?, _ outPath: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outPath = try OutParameter.required(outPath, "out_path")
        CString.store(try descriptor.requirePDFPath(), in: outPath)
    }
}

@c @implementation public func layersync_document_download(
    _ document: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in try descriptor.download() }
}

@c @implementation public func layersync_document_cancel_download(
    _ document: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { $0.cancelDownload() }
}

@c @implementation public func layersync_document_sync(
    _ document: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in try descriptor.sync() }
}

@c @implementation public func layersync_document_stop_syncing(
    _ document: OpaquePointer?, _ cancelCurrentRequest: Bool, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { $0.stopSyncing(cancelCurrentRequest: cancelCurrentRequest) }
}

@c @implementation public func layersync_document_start_listening(
    _ document: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in try descriptor.startListening() }
}

@c @implementation public func layersync_document_stop_listening(
    _ document: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { $0.stopListening() }
}

@c @implementation public func layersync_document_set_sync_delay(
    _ document: OpaquePointer?, _ delay: Double, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        try descriptor.setSyncDelay(delay)
    }
}

@c @implementation public func layersync_document_sync_delay(_ document: OpaquePointer?) -> Double {
    DocumentHandle.optional(document)?.descriptor.syncDelay ?? LAYERSYNC_SYNC_DISABLED
}

@c @implementation public func layersync_document_reauthenticate(
    _ document: OpaquePointer?, _ jwt: UnsafePointer<CChar>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        try descriptor.reauthenticate(jwt: try CString.read(jwt, "jwt"))
    }
}

@c @implementation public func layersync_document_remove_local_storage(
    _ document: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in try descriptor.removeLocalStorage() }
}

@c @implementation public func layersync_document_attempt_content_migration(
    _ document: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in try descriptor.attemptContentMigration() }
}

@c @implementation public func layersync_document_list_rejected_changes(
    _ document: OpaquePointer?, _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outJSON = try OutParameter.required(outJSON, "out_json")
        CString.store(try descriptor.rejectedChangesJSON(), in: outJSON)
    }
}

@c @implementation public func layersync_document_acknowledge_rejected_changes(
    _ document: OpaquePointer?, _ reportIDsJSON: UnsafePointer<CChar>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        _ = try descriptor.acknowledgeRejectedChanges(idsJSON: try CString.read(reportIDsJSON, "report_ids_json"))
    }
}

@c @implementation public func layersync_document_default_group(
    _ document: OpaquePointer?, _ outGroup: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outGroup = try OutParameter.required(outGroup, "out_group")
        CString.store(try descriptor.defaultGroup(), in: outGroup)
    }
}

@c @implementation public func layersync_document_set_default_group(
    _ document: OpaquePointer?, _ group: UnsafePointer<CChar>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        try descriptor.setDefaultGroup(try CString.readOptional(group, "group"))
    }
}
