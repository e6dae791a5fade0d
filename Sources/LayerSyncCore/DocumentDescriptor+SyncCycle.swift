import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// The two-way sync cycle (ARCHITECTURE.md §4, protocol.md `POST .../sync`).
extension DocumentDescriptor {
    /// Starts a sync cycle (Instant's `sync()`): send pending local changes, receive server
    /// changes, repeat until nothing is pending. Reports `didBeginSync`, a
    /// `didChangeSyncState` per state change (`sendingChanges`, `receivingChanges`, then
    /// `clean`/`dirty`), then `didFinishSync` or `didFailSync`. A call while a cycle is
    /// queued is merged into it.
    /// - Throws: `.notDownloaded`, `.invalidState` after shutdown or storage removal.
    public func sync() throws(LayerSyncError) {
        try requireDownloaded()
        guard !context.isShutDown else { throw LayerSyncError(.invalidState, "the client is shut down") }
        requestSyncCycle()
    }

    /// Stops automatic syncing that is scheduled (the debounce timer) and, if asked, the
    /// running cycle's request (which then fails with `.cancelled`). Later edits schedule
    /// automatic syncs again; listening is not affected.
    /// - Parameter cancelCurrentRequest: Whether to abort the request in flight.
    public func stopSyncing(cancelCurrentRequest: Bool) {
        mutableState.withLock { state in
            state.debounceGeneration += 1
            if cancelCurrentRequest { state.cycle?.cancel() }
        }
    }

    /// Arms the debounce timer after a local edit (no-op when auto sync is disabled, the
    /// token failed, or the client is shut down).
    func scheduleAutoSync() {
        guard !context.isShutDown else { return }
        let armed: (Int, Double)? = mutableState.withLock { state in
            guard state.syncDelay >= 0, state.authFailedToken == nil else { return nil }
            state.debounceGeneration += 1
            return (state.debounceGeneration, state.syncDelay)
        }
        guard let (generation, delay) = armed else { return }
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
            guard mutableState.withLock({ $0.debounceGeneration == generation }) else { return }
            requestSyncCycle()
        }
    }

    /// Queues a sync cycle on the work queue unless one is already queued.
    func requestSyncCycle() {
        guard !context.isShutDown else { return }
        let queue = mutableState.withLock { state -> Bool in
            guard !state.cycleQueued else { return false }
            state.cycleQueued = true
            return true
        }
        if queue { workQueue.async { [self] in runSyncCycle() } }
    }

    /// Bytes of a request body around its changes (`{"client_id":…,"epoch":…,"since":…,"changes":[]}`).
    private static let envelopeBytes = 256

    private func setActivity(_ activity: DocumentState?) {
        mutableState.withLock { $0.syncActivity = activity }
        publishState()
    }

    /// One sync cycle; runs on the work queue.
    func runSyncCycle() {
        let cancellation = TransferCancellation()
        let (token, authFailed) = mutableState.withLock { state in
            state.cycleQueued = false
            state.cycle = cancellation
            return (state.claims.token, state.authFailedToken == state.claims.token)
        }
        defer { mutableState.withLock { $0.cycle = nil } }
        guard !context.isShutDown else { return }
        emit(.didBeginSync(self))
        do throws(LayerSyncError) {
            try requireDownloaded()
            if authFailed {
                throw LayerSyncError(.accessDenied, "the server rejected the current JWT; call reauthenticate(jwt:)")
            }
            setActivity(.sendingChanges)
            try exchangeChanges(token: token, cancellation: cancellation)
            mutableState.withLock { $0.lastSyncFailedOffline = false }
            try? store.setMeta("last_sync_time", String(Self.wallClockSeconds()))
            setActivity(nil)
            emit(.didFinishSync(self))
        } catch {
            let error = error.with(documentID: documentID)
            mutableState.withLock { $0.lastSyncFailedOffline = error.code == .requestFailed }
            setActivity(nil)
            emit(.didFailSync(self, error))
            if error.code == .accessDenied, error.httpStatus != nil { noteAuthenticationFailure(error, token: token) }
        }
    }

    /// Wall-clock time (seconds since the Unix epoch, UTC) of the last sync cycle that ended with
    /// `didFinishSync`, persisted in the layer store (meta `last_sync_time`); 0 if none did.
    /// Informational only: ordering always comes from server revisions (ARCHITECTURE.md §4 rule 4).
    public var lastSyncTime: Double {
        guard let text = (try? store.meta("last_sync_time")) ?? nil, let value = Double(text), value.isFinite else { return 0 }
        return value
    }

    /// `CLOCK_REALTIME` in seconds.
    static func wallClockSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// Sends batches and applies answers until nothing is pending (or 1000 rounds).
    private func exchangeChanges(token: String, cancellation: TransferCancellation) throws(LayerSyncError) {
        // Attachments first: a record never reaches the server before what it references.
        try uploadPendingAttachments(token: token, cancellation: cancellation)
        let limit = max(1024, context.maxRequestBytes - Self.envelopeBytes)
        var budget = limit
        for _ in 0..<1000 {
            let (batch, oversized) = try store.nextBatch(maxBytes: budget, maxChangeBytes: limit)
            for change in oversized {
                report(try store.dropChange(change, reason: "payload_too_large"))
            }
            var slice = batch
            var answer: SyncAnswer?
            while answer == nil {
                do {
                    answer = try postSync(slice, token: token, cancellation: cancellation)
                } catch where error.code == .payloadLimitExceeded {
                    // 413: halve the batch; a single change over the limit is rejected alone.
                    if slice.count <= 1 {
                        if let change = slice.first { report(try store.dropChange(change, reason: "payload_too_large")) }
                        slice = []
                    } else {
                        slice = Array(slice.prefix(slice.count / 2))
                        budget = max(1, slice.reduce(0) { $0 + $1.payload.utf8.count + 1 })
                    }
                }
            }
            guard let answer else { continue }
            setActivity(.receivingChanges)
            let knownEpoch = try store.epoch()
            if answer.epochChanged || answer.epoch != knownEpoch {
                try rebase(token: token, cancellation: cancellation)
                setActivity(.sendingChanges)
                continue
            }
            var outcome = try store.applyAnswers(accepted: answer.accepted, rejected: answer.rejected)
            outcome.merge(try store.applyServerRecords(answer.changes, since: answer.hasMore ? nil : answer.revision))
            if answer.hasMore {
                outcome.merge(try pullPages(from: answer.nextSince, token: token, cancellation: cancellation))
            }
            report(outcome)
            let pending = try store.pendingCount()
            if (slice.isEmpty && batch.isEmpty && oversized.isEmpty) || pending == 0 { return }
            setActivity(.sendingChanges)
        }
    }

    /// Builds the exact request body of a batch and posts it.
    private func postSync(_ changes: [PendingChange], token: String,
                          cancellation: TransferCancellation) throws(LayerSyncError) -> SyncAnswer {
        var body = JSONObject()
        body["client_id"] = .string(try store.clientID())
        body["epoch"] = try store.epoch().map { .string($0) } ?? .null
        body["since"] = .integer(try store.since())
        var bytes = JSONValue.object(body).jsonBytes
        bytes.removeLast()  // "}"
        bytes.append(contentsOf: ",\"changes\":[".utf8)
        for (offset, change) in changes.enumerated() {
            if offset > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes.append(contentsOf: change.payload.utf8)  // frozen payloads go out byte-identical
        }
        bytes.append(contentsOf: "]}".utf8)
        return try context.server.sync(documentID: documentID, layer: layerName, body: bytes, jwt: token,
                                       session: workSession, cancellation: cancellation)
    }

    /// Pulls delta pages (`GET records?since=`) until the server has no more.
    func pullPages(from since: Int64, token: String, cancellation: TransferCancellation) throws(LayerSyncError) -> ServerChangeOutcome {
        var outcome = ServerChangeOutcome()
        var since = since
        while true {
            let page = try context.server.records(documentID: documentID, layer: layerName, since: since, jwt: token,
                                                  session: workSession, cancellation: cancellation)
            outcome.merge(try store.applyServerRecords(page.records, since: page.hasMore ? page.nextSince : page.revision))
            guard page.hasMore, page.nextSince > since else { return outcome }
            since = page.nextSince
        }
    }

    /// Downloads a full snapshot (`since=0`, paged) into the store: each page is staged as it
    /// arrives (memory bounded by one page), then the whole snapshot replaces the server side
    /// of the store in one transaction (``LayerStore/finishSnapshot(epoch:revision:reportChanges:)``).
    /// A failure before the end leaves the store as it was.
    /// - Parameter reportChanges: Whether the outcome lists the visible changes.
    /// - Returns: What changed locally and the snapshot's epoch.
    func downloadSnapshot(token: String, cancellation: TransferCancellation,
                          reportChanges: Bool) throws(LayerSyncError) -> (outcome: ServerChangeOutcome, epoch: String) {
        try store.beginSnapshot()
        var since: Int64 = 0
        while true {
            let page = try context.server.records(documentID: documentID, layer: layerName, since: since, jwt: token,
                                                  session: workSession, cancellation: cancellation)
            try store.stageSnapshotPage(page.records)
            guard page.hasMore, page.nextSince > since else {
                let outcome = try store.finishSnapshot(epoch: page.epoch, revision: page.revision, reportChanges: reportChanges)
                return (outcome, page.epoch)
            }
            since = page.nextSince
        }
    }

    /// The layer's epoch changed: re-download the snapshot and re-base pending changes on it.
    func rebase(token: String, cancellation: TransferCancellation) throws(LayerSyncError) {
        let previousEpoch = try store.epoch()
        let (outcome, epoch) = try downloadSnapshot(token: token, cancellation: cancellation, reportChanges: true)
        if previousEpoch != epoch {
            let message = "the server's layer epoch changed from \(previousEpoch ?? "none") to \(epoch) "
                + "(layer restored or recreated); \(outcome.rebased.count) unsynced local change(s) re-based onto the new snapshot"
            emit(.didResetLayer(self, LayerSyncError(.serverReset, message, documentID: documentID,
                                                     recordID: outcome.rebased.first)))
        }
        report(outcome)
    }

    /// Reports an auth failure once per token (`didFailAuthentication` + `requestToken`).
    func noteAuthenticationFailure(_ error: LayerSyncError, token: String) {
        let first = mutableState.withLock { state -> Bool in
            guard state.authFailedToken != token, state.claims.token == token else { return false }
            state.authFailedToken = token
            state.debounceGeneration += 1
            return true
        }
        guard first else { return }
        emit(.didFailAuthentication(self, error.with(documentID: documentID)))
        emit(.requestToken(self))
    }
}
