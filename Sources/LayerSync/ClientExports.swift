import CLayerSync
import LayerSyncCore
import LayerSyncModel
import LayerSyncStore

// "Client" section of include/layersync.h.

/// `layersync_client_options` of the current version with every field at its default.
private func defaultClientOptions() -> layersync_client_options {
    let defaults = ClientConfiguration(serverURL: "", storagePath: "")
    return layersync_client_options(
        version: UInt32(LAYERSYNC_CLIENT_OPTIONS_VERSION), server_url: nil, storage_path: nil,
        allow_insecure_http: defaults.allowInsecureHTTP, sync_delay_s: defaults.syncDelay,
        connect_timeout_s: defaults.connectTimeout, request_timeout_s: defaults.requestTimeout,
        long_poll_wait_s: Int32(defaults.longPollWait),
        durability: defaults.localWriteDurability.cValue)
}

@c @implementation public func layersync_client_options_init(
    _ options: UnsafeMutablePointer<layersync_client_options>?, _ version: UInt32
) -> Int32 {
    guard let options, let byteCount = VersionedStruct.clientOptionsByteCount(version: version) else {
        return ErrorCode.invalidArgument.rawValue
    }
    var value = defaultClientOptions()
    value.version = version
    VersionedStruct.write(value, byteCount: byteCount, to: options)
    return 0
}

@c @implementation public func layersync_client_create(
    _ options: UnsafePointer<layersync_client_options>?,
    _ delegate: UnsafePointer<layersync_client_delegate>?,
    _ outClient: UnsafeMutablePointer<OpaquePointer?>?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        let outClient = try OutParameter.required(outClient, "out_client")
        guard let options else { throw LayerSyncError(.invalidArgument, "options must not be NULL") }
        // Only the fields of the caller's version are read; the later ones keep their defaults.
        let optionsVersion = VersionedStruct.version(of: options)
        guard let optionsSize = VersionedStruct.clientOptionsByteCount(version: optionsVersion) else {
            throw LayerSyncError(.invalidArgument, "options.version \(optionsVersion) is not supported (this library knows "
                                 + "1 to \(LAYERSYNC_CLIENT_OPTIONS_VERSION)); use layersync_client_options_init")
        }
        let given = VersionedStruct.read(options, byteCount: optionsSize, over: defaultClientOptions())
        var table = layersync_client_delegate()
        if let delegate {
            let delegateVersion = VersionedStruct.version(of: delegate)
            guard let delegateSize = VersionedStruct.clientDelegateByteCount(version: delegateVersion) else {
                throw LayerSyncError(.invalidArgument, "delegate.version \(delegateVersion) is not supported (this library knows "
                                     + "1 to \(LAYERSYNC_CLIENT_DELEGATE_VERSION)); use LAYERSYNC_CLIENT_DELEGATE_INIT")
            }
            table = VersionedStruct.read(delegate, byteCount: delegateSize, over: table)
        }
        var configuration = ClientConfiguration(
            serverURL: try CString.read(given.server_url, "options.server_url"),
            storagePath: try CString.read(given.storage_path, "options.storage_path"))
        configuration.allowInsecureHTTP = given.allow_insecure_http
        configuration.syncDelay = given.sync_delay_s
        configuration.connectTimeout = given.connect_timeout_s
        configuration.requestTimeout = given.request_timeout_s
        configuration.longPollWait = Int(given.long_poll_wait_s)
        guard let durability = CommitDurability(cValue: given.durability) else {
            throw LayerSyncError(.invalidArgument, "options.durability \(given.durability) is not a layersync_durability_t "
                                 + "(LAYERSYNC_DURABILITY_FULL = 0 or LAYERSYNC_DURABILITY_NORMAL = 1)")
        }
        configuration.localWriteDurability = durability
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

@c @implementation public func layersync_client_listening_transport(_ client: OpaquePointer?) -> layersync_listening_transport_t {
    guard let handle = try? ClientHandle.from(client) else { return LAYERSYNC_LISTENING_STREAM }
    switch handle.client.listeningTransport {
    case .stream: return LAYERSYNC_LISTENING_STREAM
    case .longPoll: return LAYERSYNC_LISTENING_LONG_POLL
    }
}

@c @implementation public func layersync_client_storage_path(_ client: OpaquePointer?) -> UnsafePointer<CChar>? {
    (try? ClientHandle.from(client)).map { $0.storagePathCString.cString }
}

@c @implementation public func layersync_client_document_for_jwt(
    _ client: OpaquePointer?, _ jwt: UnsafePointer<CChar>?,
    _ outDocument: UnsafeMutablePointer<OpaquePointer?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        let outDocument = try OutParameter.required(outDocument, "out_document")
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
        let outJSON = try OutParameter.required(outJSON, "out_json")
        CString.store(try ClientHandle.from(client).client.localDocumentsJSON(), in: outJSON)
    }
}

@c @implementation public func layersync_client_list_cache_entries(
    _ client: OpaquePointer?, _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        let outJSON = try OutParameter.required(outJSON, "out_json")
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
