import LayerSyncModel
import LayerSyncStore
import LayerSyncTransport
import Synchronization

/// What a ``SyncClient`` shares with its ``DocumentDescriptor``s (so descriptors do not
/// reference the client): configuration, server endpoints, storage layout, event channel.
final class ClientContext: Sendable {
    let configuration: ClientConfiguration
    let server: SyncServer
    let layout: StorageLayout
    let events: EventChannel
    /// The connection sequence's result, once known.
    let serverInfo = Mutex<ServerInfo?>(nil)
    /// Cancelled by shutdown; aborts the connection sequence.
    let lifetime = TransferCancellation()
    /// The client's one listener: the change stream for every listening descriptor.
    let stream: StreamListener
    private let shutDown = Atomic<Bool>(false)

    init(configuration: ClientConfiguration, server: SyncServer, layout: StorageLayout, events: EventChannel) {
        self.configuration = configuration
        self.server = server
        self.layout = layout
        self.events = events
        stream = StreamListener(connectTimeout: configuration.connectTimeout)
    }

    /// Whether ``SyncClient/shutdown()`` has begun.
    var isShutDown: Bool { shutDown.load(ordering: .acquiring) }

    /// Marks the client shut down.
    /// - Returns: `true` the first time.
    func beginShutdown() -> Bool {
        !shutDown.exchange(true, ordering: .acquiringAndReleasing)
    }

    /// The server's request size limit, or the protocol's default before the server validated.
    var maxRequestBytes: Int {
        serverInfo.withLock { $0?.maxRequestBytes } ?? 4_194_304
    }
}
