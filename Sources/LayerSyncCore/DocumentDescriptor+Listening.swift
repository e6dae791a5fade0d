import Dispatch
import LayerSyncModel
import LayerSyncTransport

/// Listening for server changes: on the client's change stream (``StreamListener``, protocol
/// version 2), or with HTTP long-poll (`GET .../changes`) when the client fell back to it.
extension DocumentDescriptor {
    /// Longest pause between failed long-polls, in seconds.
    static let maximumBackoffSeconds = 30.0
    /// First pause after a failed long-poll, in seconds (doubled per failure, then full jitter).
    static let initialBackoffSeconds = 0.5

    /// Starts listening: on the client's one change stream (a subscription authorised by this
    /// layer's JWT, of any user), or, when the client
    /// fell back to it, with this layer's long-poll loop. Each page is applied to the local store and reported with
    /// `didReceiveChanges` (and `didRejectChanges` when a server change beat an unsent local
    /// one). Transient failures are retried with capped exponential backoff and full jitter;
    /// an auth failure (401/403) stops listening and reports `didFailAuthentication` once —
    /// a successful reauthentication resumes it; a 404 (the document or layer was deleted on
    /// the server) stops listening and reports `didFailSync` with `.invalidDocument` once.
    /// No-op if already listening.
    /// - Throws: `.notDownloaded`, `.invalidState` after shutdown.
    public func startListening() throws(LayerSyncError) {
        try requireDownloaded()
        guard !context.isShutDown else { throw LayerSyncError(.invalidState, "the client is shut down") }
        beginListening()
    }

    /// Stops listening: the subscription ends (the stream closes with the last one), or the
    /// long-poll in flight is aborted at once.
    public func stopListening() {
        mutableState.withLock { $0.listener.stop() }
        context.stream.remove(self)
    }

    /// Whether listening runs (on the stream or with long-poll).
    public var isListening: Bool { mutableState.withLock { $0.listener.isRunning } }

    /// How this layer is listened to: on the client's change stream, or with its own long-poll
    /// (the client fell back, or the stream refused this layer: the server's subscription limit,
    /// or a 404 while the stream is open, see ``StreamListener``). Meaningful while listening.
    public var listeningTransport: ListeningTransport { context.stream.transport(of: self) }

    func beginListening() {
        guard let generation = mutableState.withLock({ $0.listener.startStreaming() }) else { return }
        if !context.stream.add(self, generation: generation) { switchToLongPoll(from: generation) }
    }

    /// Moves this layer's long-poll loop back to the change stream (``Listener/switchToStream()``).
    /// - Returns: The stream run's generation, `nil` when no long-poll loop runs.
    func switchToStream() -> Int? { mutableState.withLock { $0.listener.switchToStream() } }

    /// Moves the listening run `generation` to this layer's own long-poll loop (the client fell
    /// back, or the stream cannot take this layer).
    func switchToLongPoll(from generation: Int) {
        let cancellation = TransferCancellation()
        let wake = DispatchSemaphore(value: 0)
        let loop = mutableState.withLock { $0.listener.switchToLongPoll(from: generation, cancellation: cancellation, wake: wake) }
        guard let loop else { return }
        listenQueue.async { [self] in listenLoop(generation: loop, cancellation: cancellation, wake: wake) }
    }

    func isCurrentListener(_ generation: Int) -> Bool {
        !context.isShutDown && mutableState.withLock { $0.listener.isCurrent(generation) }
    }

    private func listenLoop(generation: Int, cancellation: TransferCancellation, wake: DispatchSemaphore) {
        var failures = 0
        while isCurrentListener(generation) {
            guard context.server.isNetworkAvailable else {
                _ = wake.wait(timeout: .now() + Self.maximumBackoffSeconds)
                continue
            }
            let token = jwt
            do throws(LayerSyncError) {
                let epoch = try store.epoch()  // before `since`: a rebase in between gives a newer since, never an older one
                let since = try store.since()
                let page = try context.server.changes(documentID: documentID, layer: layerName, since: since, epoch: epoch,
                                                      waitSeconds: context.configuration.longPollWait, jwt: token,
                                                      session: listenSession, cancellation: cancellation)
                guard isCurrentListener(generation) else { return }
                let result: LayerSyncError? = workQueue.sync { [self] in
                    do throws(LayerSyncError) {
                        try applyLongPollPage(page, token: token, cancellation: cancellation)
                        return nil
                    } catch {
                        return error
                    }
                }
                if let result { throw result }
                failures = 0  // only once the answer was applied: one that cannot be keeps backing off
            } catch where error.code == .cancelled {
                return
            } catch where error.code == .invalidDocument && error.httpStatus == 404 {
                // The server no longer has the document or layer (deleted): retrying cannot
                // help, so stop listening and report it once (pending changes are kept).
                let stopped = mutableState.withLock { $0.listener.stopForMissingLayer(generation: generation) }
                if stopped { emit(.didFailSync(self, error.with(documentID: documentID))) }
                return
            } catch where error.code == .accessDenied && error.httpStatus != nil {
                mutableState.withLock { $0.listener.stopForAuthFailure(generation: generation) }
                noteAuthenticationFailure(error, token: token)
                return
            } catch {
                if error.code == .invalidServerData, isCurrentListener(generation) {
                    // A cursor ahead of the server's layer refuses every answer: re-based, asked again at once.
                    let rebased: Bool = workQueue.sync { [self] in
                        guard (try? rebaseIfCursorIsAheadOfServer(after: error, token: token, cancellation: cancellation)) ?? false else {
                            return false
                        }
                        publishState()
                        if hasUnsyncedChanges { scheduleAutoSync() }
                        return true
                    }
                    if rebased {
                        failures = 0
                        continue
                    }
                }
                failures += 1
                _ = wake.wait(timeout: .now() + Self.backoffSeconds(failures: failures))
            }
        }
    }

    /// Applies one long-poll answer on the work queue (re-basing on a new epoch) and triggers
    /// an automatic sync when local changes are pending.
    ///
    /// An epoch that differs from the one held is a claim that the layer was recreated or
    /// restored, and believing a garbled one would cost a full re-download. The decoder
    /// already refused an ill-formed epoch (not a string, empty, over 128 characters,
    /// control characters); a well-formed different one is confirmed before the snapshot is
    /// downloaded, by the smallest page of the layer (`GET records?since=&limit=1`): if that
    /// page carries the epoch held, the long-poll's epoch was garbled on the way and the answer
    /// is `.invalidServerData` (nothing applied; the loop backs off); if it carries another
    /// epoch too, the layer did change and is re-based (protocol.md "What a client checks").
    func applyLongPollPage(_ page: LayerPage, token: String, cancellation: TransferCancellation) throws(LayerSyncError) {
        let held = try store.epoch()
        if page.epoch != held {
            let since = try store.since()
            let check = try context.server.records(documentID: documentID, layer: layerName, since: since, epoch: held,
                                                   limit: 1, jwt: token, session: workSession, cancellation: cancellation)
            if let held, check.epoch == held {
                throw LayerSyncError(.invalidServerData, "long-poll answer (since=\(since)): the epoch \(page.epoch) differs from "
                                     + "the one held (\(held)) but the layer's records still carry the held one; not an epoch change",
                                     documentID: documentID)
            }
            try rebase(token: token, cancellation: cancellation)
        } else {
            report(try store.applyServerRecords(page.records, since: page.hasMore ? page.nextSince : page.revision))
        }
        publishState()
        if hasUnsyncedChanges { scheduleAutoSync() }
    }
}
