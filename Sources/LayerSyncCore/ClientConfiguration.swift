import LayerSyncStore

/// Settings of a ``SyncClient``; fixed when the client is created.
public struct ClientConfiguration: Sendable {
    /// Base URL of the sync server, e.g. `https://sync.example.com` (a path prefix is allowed).
    public var serverURL: String
    /// Directory that holds the local stores (created with mode 0700 if absent).
    public var storagePath: String
    /// Allow plain `http://` to non-loopback hosts. Loopback (127.0.0.0/8, ::1,
    /// `localhost`) is always allowed.
    public var allowInsecureHTTP: Bool = false
    /// Default debounce, in seconds, between a local edit and the automatic sync for new
    /// descriptors; a negative value (the C header's `LAYERSYNC_SYNC_DISABLED`, -1) turns
    /// automatic sync off.
    public var syncDelay: Double = 1.0
    /// Seconds allowed for establishing a connection; must be positive.
    public var connectTimeout: Double = 10
    /// Seconds allowed for one ordinary request (long-polls get `longPollWait` on top); must be
    /// positive.
    public var requestTimeout: Double = 30
    /// Seconds a long-poll asks the server to hold the request (`wait=`); must be positive.
    public var longPollWait: Int = 30
    /// How local writes made through the API commit (the C options' `durability`): `.full`
    /// (default, `LAYERSYNC_DURABILITY_FULL`) fsyncs each one, so it survives a power loss when
    /// the call returns (docs/rules.md rule 1); `.relaxed` (`LAYERSYNC_DURABILITY_NORMAL`)
    /// does not: the write survives an app crash, and a power loss or OS crash may undo the most
    /// recent ones (a suffix, never anything already sent). A layer store shared with another
    /// client of the process that asked for `.full` stays `.full` (the strictest wins; see
    /// docs/durability.md).
    public var localWriteDurability: CommitDurability = .full
    /// The host's reachability hint (the C delegate's `is_network_available`), or `nil` (the
    /// engine then only knows what ``SyncClient/setNetworkAvailable(_:)`` tells it).
    ///
    /// Called on the client's event queue, never on a network thread and never while the
    /// engine holds a lock: after a request failed without an HTTP answer (connect refused,
    /// reset, timeout, DNS), and then every ``SyncClient/networkHintRecheckSeconds`` while its
    /// last answer was `false`. `false` makes the client behave as after
    /// `setNetworkAvailable(false)` (no requests, syncs fail fast with `.requestFailed`, edits
    /// stay pending, long-polls wait) until a later answer is `true`, which resumes pending work
    /// at once. It never lifts an explicit `setNetworkAvailable(false)`. It must return
    /// promptly (other events wait meanwhile) and may call the client's API.
    public var reachabilityHint: (@Sendable () -> Bool)?

    /// Creates a configuration with defaults for everything else.
    /// - Parameters:
    ///   - serverURL: Base URL of the sync server.
    ///   - storagePath: Directory of the local stores.
    public init(serverURL: String, storagePath: String) {
        self.serverURL = serverURL
        self.storagePath = storagePath
    }
}
