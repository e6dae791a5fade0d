import CLayerSync
import LayerSyncCore

// "Client" section of include/layersync.h.

@c @implementation public func layersync_client_options_init(
    _ options: UnsafeMutablePointer<layersync_client_options>?, _ version: UInt32
) -> Int32 {
    guard let options, version == UInt32(LAYERSYNC_CLIENT_OPTIONS_VERSION) else {
        return ErrorCode.invalidArgument.rawValue
    }
    let defaults = ClientConfiguration(serverURL: "", storagePath: "")
    options.pointee = layersync_client_options(
        version: version, server_url: nil, storage_path: nil,
        allow_insecure_http: defaults.allowInsecureHTTP, sync_delay_s: defaults.syncDelay,
        connect_timeout_s: defaults.connectTimeout, request_timeout_s: defaults.requestTimeout,
        long_poll_wait_s: Int32(defaults.longPollWait),
        durability: defaults.localWriteDurability.cValue)
    return 0
}

@c @implementation public func layersync_client_create(
    _ options: UnsafePointer<layersync_client_options>?,
    _ delegate: UnsafePointer<layersync_client_delegate>?,
    _ outClient: UnsafeMutablePointer<OpaquePointer?>?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        guard let outClient else { throw LayerSyncError(.invalidArgument, "out_client must not be NULL") }
        outClient.pointee = nil
        guard let options else { throw LayerSyncError(.invalidArgument, "options must not be NULL") }
        guard options.pointee.version == UInt32(LAYERSYNC_CLIENT_OPTIONS_VERSION) else {
            throw LayerSyncError(.invalidArgument, "options.version \(options.pointee.version) is not supported; use layersync_client_options_init")
        }
        var table = layersync_client_delegate()
        if let delegate {
            guard delegate.pointee.version == UInt32(LAYERSYNC_CLIENT_DELEGATE_VERSION) else {
                throw LayerSyncError(.invalidArgument, "delegate.version \(delegate.pointee.version) is not supported; use LAYERSYNC_CLIENT_DELEGATE_INIT")
            }
            table = delegate.pointee
        }
        var configuration = ClientConfiguration(
            serverURL: try CString.read(options.pointee.server_url, "options.server_url"),
            storagePath: try CString.read(options.pointee.storage_path, "options.storage_path"))
        configuration.allowInsecureHTTP = options.pointee.allow_insecure_http
        configuration.syncDelay = options.pointee.sync_delay_s
        configuration.connectTimeout = options.pointee.connect_timeout_s
        configuration.requestTimeout = options.pointee.request_timeout_s
        configuration.longPollWait = Int(options.pointee.long_poll_wait_s)
        guard let durability = CommitDurability(cValue: options.pointee.durability) else {
            throw LayerSyncError(.invalidArgument, "options.durability \(options.pointee.durability) is not a layersync_durability_t "
                                 + "(LAYERSYNC_DURABILITY_FULL = 0 or LAYERSYNC_DURABILITY_NORMAL = 1)")
        }
        configuration.localWriteDurability = durability
        guard configuration.connectTimeout > 0, configuration.requestTimeout > 0, configuration.longPollWait > 0 else {
            throw LayerSyncError(.invalidArgument, "timeouts and long_poll_wait_s must be positive")
        }
        let handle = try ClientHandle(configuration: configuration, delegate: table)
        outClient.pointee = OpaquePointer(Unmanaged.passRetained(handle).toOpaque())
    }
}

@c @implementation public func layersync_client_destroy(
    _ client: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    guard let client else { return 0 }
    return ErrorBridge.run(error) { () throws(LayerSyncError) in
        let unmanaged = Unmanaged<ClientHandle>.fromOpaque(UnsafeRawPointer(client))
        try unmanaged.takeUnretainedValue().destroy()
        unmanaged.release()
    }
}

@c @implementation public func layersync_client_server_url(_ client: OpaquePointer?) -> UnsafePointer<CChar>? {
    (try? ClientHandle.from(client)).map { $0.serverURLCString.cString }
}

@c @implementation public func layersync_client_storage_path(_ client: OpaquePointer?) -> UnsafePointer<CChar>? {
    (try? ClientHandle.from(client)).map { $0.storagePathCString.cString }
}

@c @implementation public func layersync_client_document_for_jwt(
    _ client: OpaquePointer?, _ jwt: UnsafePointer<CChar>?,
    _ outDocument: UnsafeMutablePointer<OpaquePointer?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        guard let outDocument else { throw LayerSyncError(.invalidArgument, "out_document must not be NULL") }
        outDocument.pointee = nil
        let handle = try ClientHandle.from(client)
        let descriptor = try handle.client.document(forJWT: try CString.read(jwt, "jwt"))
        outDocument.pointee = handle.handle(for: descriptor).opaque
    }
}

@c @implementation public func layersync_client_set_network_available(
    _ client: OpaquePointer?, _ available: Bool, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        try ClientHandle.from(client).client.setNetworkAvailable(available)
    }
}

@c @implementation public func layersync_client_local_documents(
    _ client: OpaquePointer?, _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        guard let outJSON else { throw LayerSyncError(.invalidArgument, "out_json must not be NULL") }
        outJSON.pointee = nil
        CString.store(try ClientHandle.from(client).client.localDocumentsJSON(), in: outJSON)
    }
}

@c @implementation public func layersync_client_list_cache_entries(
    _ client: OpaquePointer?, _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        guard let outJSON else { throw LayerSyncError(.invalidArgument, "out_json must not be NULL") }
        outJSON.pointee = nil
        CString.store(try ClientHandle.from(client).client.cacheEntriesJSON(), in: outJSON)
    }
}

@c @implementation public func layersync_client_remove_unreferenced_cache_entries(
    _ client: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        try ClientHandle.from(client).client.removeUnreferencedCacheEntries()
    }
}

@c @implementation public func layersync_client_remove_local_storage(
    _ client: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        try ClientHandle.from(client).client.removeLocalStorage()
    }
}

@c @implementation public func layersync_client_remove_local_storage_for_document(
    _ client: OpaquePointer?, _ documentID: UnsafePointer<CChar>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        let handle = try ClientHandle.from(client)
        try handle.client.removeLocalStorage(documentID: try CString.read(documentID, "document_id"))
    }
}

/// `layersync_durability_t` ↔ ``CommitDurability``: FULL ↔ `.full`, NORMAL ↔ `.relaxed`.
private extension CommitDurability {
    init?(cValue: Int32) {
        switch cValue {
        case Int32(bitPattern: LAYERSYNC_DURABILITY_FULL.rawValue): self = .full
        case Int32(bitPattern: LAYERSYNC_DURABILITY_NORMAL.rawValue): self = .relaxed
        default: return nil
        }
    }

    var cValue: Int32 {
        Int32(bitPattern: (self == .full ? LAYERSYNC_DURABILITY_FULL : LAYERSYNC_DURABILITY_NORMAL).rawValue)
    }
}
