import Dispatch
import LayerSyncModel
import LayerSyncStore
import LayerSyncTransport
import Synchronization

/// A LayerSync client: one per server URL and storage directory (Instant's `InstantClient`).
///
/// It owns the on-disk storage, hands out one ``DocumentDescriptor`` per
/// (document id, layer), and reports everything through one event handler.
///
/// Threading: every method may be called from any thread, including from inside the
/// event handler (except ``shutdown()``). All events of a client are delivered in order
/// by calling the handler on one serial background queue, never while the engine holds a
/// lock.
public final class SyncClient: Sendable {
    let context: ClientContext
    private struct DescriptorKey: Hashable, Sendable {
        var documentID: String
        var layerName: String
    }
    private let descriptors = Mutex<[DescriptorKey: DocumentDescriptor]>([:])

    /// Seconds between two asks of ``ClientConfiguration/reachabilityHint`` while its last
    /// answer was `false` (the C header's `LAYERSYNC_NETWORK_HINT_RECHECK_S`).
    public static let networkHintRecheckSeconds = 5.0

    /// Asks of the reachability hint that are queued or scheduled: at most one ask queued per
    /// explicit host word (``NetworkAvailability/hostWords``) and one recheck scheduled.
    private struct HintAsks {
        /// The host word the queued ask was queued under; `nil` while none is queued.
        var askQueuedUnder: UInt64?
        var recheckScheduled = false
    }
    private let hintAsks = Mutex(HintAsks())

    /// Creates a client and starts its connection sequence.
    ///
    /// Validation is synchronous; then `GET /sync/v1/info` runs in the background and its
    /// outcome is reported once as ``ClientEvent/serverDidValidate(_:)``: the server info, or
    /// `.requestFailed` (unreachable), `.oldClient`/`.oldServer` (protocol mismatch),
    /// `.invalidServerData`.
    /// - Parameters:
    ///   - configuration: Server URL, storage path and tuning.
    ///   - eventHandler: Receives every event of this client, on one serial background queue.
    /// - Throws: `.invalidURL` for a malformed URL or plain http to a non-loopback host
    ///   without `allowInsecureHTTP`; `.couldNotWriteToDisk` when the storage directory
    ///   cannot be created (mode 0700); `.invalidArgument` for a timeout or long-poll wait that is
    ///   not positive (checked first), or an empty storage path.
    public init(configuration: ClientConfiguration, eventHandler: @escaping @Sendable (ClientEvent) -> Void) throws(LayerSyncError) {
        // A long-poll wait of 0 would make listening a busy loop of requests, not a long-poll.
        guard configuration.connectTimeout > 0, configuration.requestTimeout > 0, configuration.longPollWait > 0 else {
            throw LayerSyncError(.invalidArgument, "the timeouts and the long-poll wait must be positive "
                                 + "(connect_timeout_s, request_timeout_s, long_poll_wait_s)")
        }
        let url = try ServerURL(configuration.serverURL, allowInsecureHTTP: configuration.allowInsecureHTTP)
        guard !configuration.storagePath.isEmpty else {
            throw LayerSyncError(.invalidArgument, "storagePath is empty")
        }
        let layout = StorageLayout(root: configuration.storagePath, server: url)
        try StorageLayout.createDirectory(layout.serverDirectory)
        let events = EventChannel(label: "layersync.client.events", handler: eventHandler)
        context = ClientContext(configuration: configuration,
                                server: SyncServer(url: url, requestTimeout: configuration.requestTimeout),
                                layout: layout, events: events)
        if configuration.reachabilityHint != nil {
            // Runs on the failing request's thread: only queues an ask, never waits for it.
            context.server.onTransportFailure { [weak self] word in self?.noteTransportFailure(startedUnder: word) }
        }
        let context = self.context
        DispatchQueue.global().async {
            let session = HTTPSession(connectTimeoutSeconds: configuration.connectTimeout)
            do throws(LayerSyncError) {
                let info = try context.server.info(session: session, cancellation: context.lifetime)
                context.serverInfo.withLock { $0 = info }
                context.events.emit(.serverDidValidate(.success(info)))
            } catch {
                context.events.emit(.serverDidValidate(.failure(error)))
            }
        }
    }

    /// The normalised server URL.
    public var serverURL: String { context.server.url.base }

    /// The storage directory.
    public var storagePath: String { context.layout.root }

    /// The server's info once the connection sequence succeeded, else `nil`.
    public var serverInfo: ServerInfo? { context.serverInfo.withLock { $0 } }

    /// The descriptor for the document and layer a JWT grants (Instant's
    /// `documentDescriptor(forJWT:)`). Only the token's shape is checked here.
    ///
    /// The same (document id, layer) always gives the same instance (until its local storage
    /// is removed: then a new one), which the client keeps
    /// alive until it is deallocated; a later call with another token for the same layer
    /// returns it unchanged (use ``DocumentDescriptor/reauthenticate(jwt:)`` to change tokens).
    /// Opening the descriptor opens (and locks) the layer's local store.
    /// - Parameter jwt: The token.
    /// - Returns: The descriptor.
    /// - Throws: `.invalidJWT` (shape), `.userIDMismatch` (user differs from the one pinned to
    ///   the local layer), `.storageLocked` (another process uses the layer),
    ///   `.couldNotWriteToDisk`, `.databaseAccessFailed`, `.invalidState` after shutdown.
    public func document(forJWT jwt: String) throws(LayerSyncError) -> DocumentDescriptor {
        let claims = try JWTClaims(token: jwt)
        guard !context.isShutDown else { throw LayerSyncError(.invalidState, "the client is shut down") }
        let key = DescriptorKey(documentID: claims.documentID, layerName: claims.layerName)
        let result: Result<DocumentDescriptor, LayerSyncError> = descriptors.withLock { descriptors in
            // A descriptor whose storage was removed stays invalid; the layer gets a fresh one.
            if let existing = descriptors[key], !existing.isInvalid {
                // The layer is pinned to one user (docs/architecture.md §3); another user's JWT
                // must not hand out that user's descriptor.
                if let user = claims.userID, let pinned = existing.userID, user != pinned {
                    return .failure(LayerSyncError(
                        .userIDMismatch, "the JWT's user_id '\(user)' differs from '\(pinned)' pinned to the local layer",
                        documentID: claims.documentID))
                }
                return .success(existing)
            }
            do throws(LayerSyncError) {
                let descriptor = try DocumentDescriptor(claims: claims, context: context)
                descriptors[key] = descriptor
                return .success(descriptor)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Every descriptor handed out so far.
    public var documents: [DocumentDescriptor] { descriptors.withLock { Array($0.values) } }

    /// Tells the engine whether the network is usable (the host's explicit word).
    /// While `false` no request is attempted: syncs fail fast with `.requestFailed` and their
    /// changes stay pending; long-polls wait. `true` resumes pending work at once.
    ///
    /// The explicit word always wins over ``ClientConfiguration/reachabilityHint``: `false`
    /// holds until the next `setNetworkAvailable(true)` whatever the hint answers; `true` also
    /// clears a `false` the hint answered before (the hint is asked again after the next
    /// request started after this call that fails without an HTTP answer).
    /// - Parameter available: Whether requests may be attempted.
    public func setNetworkAvailable(_ available: Bool) {
        let resumed = context.server.updateNetworkAvailability { flags in
            flags.hostSaysAvailable = available
            flags.hostWords &+= 1  // asks queued before this call are void (askHint)
            if available { flags.hintSaysOffline = false }
        }
        if resumed { resumeNetworkWork() }
    }

    /// Resumes what waited for the network: failed syncs, pending edits, long-polls.
    private func resumeNetworkWork() {
        context.stream.wakeUp()
        for descriptor in documents { descriptor.networkDidBecomeAvailable() }
    }

    /// How listening works: one change stream for every listened layer (protocol version 2,
    /// the default, whatever users the layers' JWTs name), or per-layer long-polls once the client fell back to them (the server
    /// does not offer the stream, or something between buffers it; the reason is also written
    /// to stderr once). After a fallback the stream is tried again after 5 minutes (doubled
    /// per failed try, at most an hour), and at once when the network comes back
    /// (``setNetworkAvailable(_:)``).
    public var listeningTransport: ListeningTransport { context.stream.transport }

    // MARK: Reachability hint

    /// A request got no HTTP answer: ask the hint, unless its last answer already was `false`
    /// (then the periodic recheck runs), or unless the host spoke since the request started (its
    /// failure is older than that word, rule 5). Any thread; only queues.
    /// - Parameter word: ``NetworkAvailability/hostWords`` when the failed request was started.
    private func noteTransportFailure(startedUnder word: UInt64) {
        let flags = context.server.networkAvailability
        guard !flags.hintSaysOffline, flags.hostWords == word else { return }
        queueHintAsk(under: word)
    }

    /// Queues one ask of the hint on the event queue (none if one is queued already under the
    /// same host word). An ask queued by a failed request runs before the failure's own event
    /// (`didFailSync`, …) is delivered, since both go through the same FIFO.
    /// - Parameter word: ``NetworkAvailability/hostWords`` when the failure (or recheck) happened.
    private func queueHintAsk(under word: UInt64) {
        guard let hint = context.configuration.reachabilityHint, !context.isShutDown else { return }
        let queue = hintAsks.withLock { asks in
            // An ask under an older word than the queued one would only be dropped; letting it
            // overwrite the mark would let a second ask under the newer word queue behind.
            if let queued = asks.askQueuedUnder, queued >= word { return false }
            asks.askQueuedUnder = word
            return true
        }
        guard queue else { return }
        context.events.perform { [weak self] in self?.askHint(hint, under: word) }
    }

    /// Calls the hint (on the event queue, no engine lock held) and applies its answer.
    ///
    /// An ask queued before the host's latest explicit ``setNetworkAvailable(_:)`` is dropped
    /// without calling the hint, and an answer given while the host spoke is dropped too: that
    /// call is fresher than the failure the ask was for (docs/threading.md §8 rule 5). Without
    /// this, a request that failed just before `setNetworkAvailable(true)` could take the
    /// network away again after it, with nothing left to give it back while the hint says false.
    private func askHint(_ hint: @Sendable () -> Bool, under word: UInt64) {
        // A failure during the call queues a new ask.
        hintAsks.withLock { asks in if asks.askQueuedUnder == word { asks.askQueuedUnder = nil } }
        guard !context.isShutDown else { return }
        if context.server.networkAvailability.hostWords == word {
            let reachable = hint()
            let resumed = context.server.updateNetworkAvailability { flags in
                if flags.hostWords == word { flags.hintSaysOffline = !reachable }
            }
            if resumed { resumeNetworkWork() }
        }
        // While the flag says offline (this answer, or an earlier one a dropped ask left in
        // place: an explicit false does not clear it), the hint is asked again periodically.
        if context.server.networkAvailability.hintSaysOffline { scheduleHintRecheck() }
    }

    /// Asks the hint again in ``networkHintRecheckSeconds`` if its answer is still `false` then.
    private func scheduleHintRecheck() {
        let schedule = hintAsks.withLock { asks in
            defer { asks.recheckScheduled = true }
            return !asks.recheckScheduled
        }
        guard schedule else { return }
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.networkHintRecheckSeconds) { [weak self] in
            guard let self else { return }
            hintAsks.withLock { $0.recheckScheduled = false }
            let flags = context.server.networkAvailability
            if flags.hintSaysOffline { queueHintAsk(under: flags.hostWords) }
        }
    }

    /// Whether the caller runs inside this client's event handler.
    public var isOnEventQueue: Bool { context.events.isCurrent }

    /// Stops the client: cancels all network work (running transfers abort at once,
    /// long-polls end), stops debounce timers, waits until every event already queued has been
    /// delivered, and afterwards emits no more events. Idempotent. Local records stay readable
    /// and writable through existing descriptors, but nothing is synced any more.
    /// - Throws: `.invalidState` when called from the event handler (it would wait for itself).
    public func shutdown() throws(LayerSyncError) {
        guard !isOnEventQueue else {
            throw LayerSyncError(.invalidState, "the client cannot be shut down (destroyed) from its own event handler: "
                                 + "it would wait for itself")
        }
        guard context.beginShutdown() else { return }
        context.lifetime.cancel()
        context.stream.shutdown()
        let all = documents
        for descriptor in all { descriptor.cancelAllWork() }
        context.stream.waitUntilIdle()
        for descriptor in all { descriptor.waitUntilIdle() }
        context.events.close()
    }

    deinit {
        if context.beginShutdown() {
            context.lifetime.cancel()
            context.stream.shutdown()
            for descriptor in descriptors.withLock({ Array($0.values) }) { descriptor.cancelAllWork() }
        }
    }
}
