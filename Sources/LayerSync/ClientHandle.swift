import CLayerSync
import LayerSyncCore
import LayerSyncModel
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a `layersync_client *` points to: the core's ``SyncClient``, the copied callback
/// table, the C strings the header says the client owns, and one ``DocumentHandle`` per
/// descriptor. Retained by the pointer handed to C until `layersync_client_destroy`.
final class ClientHandle: Sendable {
    let delegate: DelegateTable
    let serverURLCString: OwnedCString
    let storagePathCString: OwnedCString
    /// Set once, right after the core client is created; nil after destroy.
    private let coreClient = Mutex<SyncClient?>(nil)
    private let documents = Mutex<[ObjectIdentifier: DocumentHandle]>([:])

    /// Creates the core client; its events are translated to the C callback table.
    /// - Throws: whatever `SyncClient.init` throws (`.invalidURL`, `.couldNotWriteToDisk`, …).
    init(configuration: ClientConfiguration, delegate: layersync_client_delegate) throws(LayerSyncError) {
        let table = DelegateTable(table: delegate)
        self.delegate = table
        serverURLCString = OwnedCString(configuration.serverURL)
        storagePathCString = OwnedCString(configuration.storagePath)
        var configuration = configuration
        if delegate.is_network_available != nil {
            // `is_network_available`: the core calls it on the client's callback thread only,
            // so never after destroy drained that thread (nor after `release_context`).
            // Captures the copied table, not `self` (the core client must not retain the handle).
            configuration.reachabilityHint = { table.table.is_network_available?(table.table.context) ?? true }
        }
        // The core client owns its event handler, so the handler must not retain `self`.
        // `self` is fully initialised here, so the weak box is set before any event can run.
        let box = WeakClientHandle(self)
        let client = try SyncClient(configuration: configuration) { event in
            box.value?.deliver(event)
        }
        coreClient.withLock { $0 = client }
    }

    var client: SyncClient {
        guard let client = coreClient.withLock({ $0 }) else { fatalError("layersync: client used after destroy") }
        return client
    }

    var opaque: OpaquePointer { OpaquePointer(Unmanaged.passUnretained(self).toOpaque()) }

    /// The handle behind a `layersync_client *`.
    /// - Throws: `.invalidArgument` for NULL.
    static func from(_ pointer: OpaquePointer?) throws(LayerSyncError) -> ClientHandle {
        guard let pointer else { throw LayerSyncError(.invalidArgument, "client must not be NULL") }
        return Unmanaged<ClientHandle>.fromOpaque(UnsafeRawPointer(pointer)).takeUnretainedValue()
    }

    /// The one ``DocumentHandle`` of `descriptor`, created on first use.
    func handle(for descriptor: DocumentDescriptor) -> DocumentHandle {
        documents.withLock { map in
            if let existing = map[ObjectIdentifier(descriptor)] { return existing }
            let created = DocumentHandle(descriptor: descriptor)
            map[ObjectIdentifier(descriptor)] = created
            return created
        }
    }

    /// Shuts the core client down (cancel, drain callbacks), then calls `release_context`.
    /// - Throws: `.invalidState` when called from one of this client's callbacks (the core's
    ///   rule, ``SyncClient/shutdown()``).
    func destroy() throws(LayerSyncError) {
        try client.shutdown()
        // Observers still registered: release them (their pointers die with the client).
        for document in documents.withLock({ Array($0.values) }) {
            for observer in document.observers.withLock({ list in defer { list.removeAll() }; return list }) {
                observer.remove(onCallbackThread: false)
                Unmanaged.passUnretained(observer).release()
            }
        }
        if let release = delegate.table.release_context {
            release(delegate.table.context)
        }
        documents.withLock { $0.removeAll() }
        coreClient.withLock { $0 = nil }
    }
}

/// Lets the core's event handler reach the ``ClientHandle`` without retaining it.
private final class WeakClientHandle: Sendable {
    private let reference: Mutex<ClientHandleRef>
    init(_ handle: ClientHandle) { reference = Mutex(ClientHandleRef(value: handle)) }
    var value: ClientHandle? { reference.withLock { $0.value } }
}

private struct ClientHandleRef: Sendable {
    weak var value: ClientHandle?
}
