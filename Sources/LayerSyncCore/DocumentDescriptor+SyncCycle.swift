import Dispatch
import LayerSyncModel
import LayerSyncStore
import LayerSyncTransport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The two-way sync cycle (docs/architecture.md §4, protocol.md `POST .../sync`).
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
        mutableState.withLock { $0.syncCycle.stop(cancelCurrentRequest: cancelCurrentRequest) }
    }

    /// Arms the debounce timer after a local edit (no-op when auto sync is disabled, the
    /// token failed, or the client is shut down).
    func scheduleAutoSync() {
        guard !context.isShutDown else { return }
        let armed = mutableState.withLock { state -> (generation: Int, delay: Double)? in
            guard !state.authentication.isTokenRejected else { return nil }
            return state.syncCycle.armDebounceTimer()
        }
        guard let (generation, delay) = armed else { return }
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
            guard mutableState.withLock({ $0.syncCycle.isArmedDebounceTimer(generation) }) else { return }
            requestSyncCycle()
        }
    }

    /// Queues a sync cycle on the work queue unless one is already queued.
    func requestSyncCycle() {
        guard !context.isShutDown else { return }
        let queue = mutableState.withLock { $0.syncCycle.request() }
        if queue { workQueue.async { [self] in runSyncCycle() } }
    }

    /// Bytes of a request body around its changes (`{"client_id":…,"epoch":…,"since":…,"changes":[]}`).
    private static let envelopeBytes = 256
    /// Rounds in a row without progress (no pending change settled, `since` unchanged) after
    /// which a sync cycle fails instead of looping; a pipelined round shows its progress one
    /// round late, so this is generous.
    static let maximumStalledRounds = 20

    private func setActivity(_ activity: DocumentState?) {
        mutableState.withLock { $0.syncCycle.setActivity(activity) }
        publishState()
    }

    /// One sync cycle; runs on the work queue.
    func runSyncCycle() {
        let cancellation = TransferCancellation()
        let (token, authFailed) = mutableState.withLock { state in
            state.syncCycle.begin(cancellation: cancellation)
            return (state.authentication.token, state.authentication.isTokenRejected)
        }
        defer { mutableState.withLock { $0.syncCycle.end() } }
        guard !context.isShutDown else { return }
        emit(.didBeginSync(self))
        do throws(LayerSyncError) {
            try requireDownloaded()
            if authFailed {
                throw LayerSyncError(.accessDenied, "the server rejected the current JWT; call reauthenticate(jwt:)")
            }
            try reconcileGrant(token: token, cancellation: cancellation)
            setActivity(.sendingChanges)
            var storedSyncTime: Bool
            do throws(LayerSyncError) {
                storedSyncTime = try exchangeChanges(token: token, cancellation: cancellation)
            } catch {
                // A cursor ahead of the server's layer refuses every answer: re-based, one more try.
                let rebased = (try? rebaseIfCursorIsAheadOfServer(after: error, token: token, cancellation: cancellation)) ?? false
                guard rebased else { throw error }
                storedSyncTime = try exchangeChanges(token: token, cancellation: cancellation)
            }
            mutableState.withLock { $0.syncCycle.finish(failedOffline: false) }
            if !storedSyncTime { try? store.setMeta("last_sync_time", String(Self.wallClockSeconds()), durability: .relaxed) }
            setActivity(nil)
            deliverUndeliveredRejections()
            emit(.didFinishSync(self))
            noteSyncCycleEnded(nil)
        } catch {
            let error = error.with(documentID: documentID)
            mutableState.withLock { $0.syncCycle.finish(failedOffline: error.code == .requestFailed) }
            setActivity(nil)
            // Rejections committed before the failure (a paged answer whose continuation failed,
            // `stopSyncing`) are reported all the same: they are adopted already.
            deliverUndeliveredRejections()
            emit(.didFailSync(self, error))
            if error.code == .accessDenied, error.httpStatus != nil { noteAuthenticationFailure(error, token: token) }
            noteSyncCycleEnded(error)  // an answer the checks refused: retried with backoff
        }
    }

    /// Wall-clock time (seconds since the Unix epoch, UTC) of the last sync cycle that ended with
    /// `didFinishSync`, persisted in the layer store (meta `last_sync_time`); 0 if none did.
    /// Informational only: ordering always comes from server revisions (docs/rules.md rule 4).
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
    ///
    /// Pipelined when more than one batch is pending: the next batch is frozen while a request
    /// is in flight, and is sent as soon as that request's answer arrives — before that answer
    /// is applied — so this side's store work overlaps the server's work on the next batch. A
    /// request sent ahead claims `since` = the previous answer's `revision` (complete up to
    /// there: only answers without `has_more` are applied behind the next request). Anything
    /// unusual (413, an epoch change, `has_more`, an error) falls back to one request at a time.
    /// Each round's store work is one transaction (answer applied + next batch frozen).
    /// - Returns: Whether `last_sync_time` was already stored with the last answer.
    private func exchangeChanges(token: String, cancellation: TransferCancellation) throws(LayerSyncError) -> Bool {
        // Attachments first: a record never reaches the server before what it references.
        try uploadPendingAttachments(token: token, cancellation: cancellation)
        let limit = max(1024, context.maxRequestBytes - Self.envelopeBytes)
        var budget = limit
        func limits(inFlight: [PendingChange] = []) -> LayerStore.BatchLimits {
            LayerStore.BatchLimits(maxBytes: budget, maxChangeBytes: limit, inFlight: inFlight)
        }
        var batch = try store.nextBatch(limits())
        // An answer whose request is done but which is not applied yet (applied while the next
        // request is in flight), with the changes that request sent.
        var unapplied: (answer: SyncAnswer, sent: [PendingChange])?
        // A cycle runs until nothing is pending, however many rounds that takes; it only gives
        // up when rounds stop making progress (no change left the queue, `since` did not move).
        var progress = (pending: Int.max, since: Int64.min)
        var stalledRounds = 0
        while true {
            let now = (pending: try store.pendingCount(), since: try store.since())
            if now.pending < progress.pending || now.since > progress.since {
                progress = now
                stalledRounds = 0
            } else {
                stalledRounds += 1
                if stalledRounds > Self.maximumStalledRounds { break }
            }
            for change in batch.oversized {
                report(try store.dropChange(change, reason: "payload_too_large"))
            }
            let slice = batch.batch
            if slice.isEmpty, let (answer, sent) = unapplied {
                // The last request ran ahead of its predecessor's answer: apply that one now.
                let round = try applyAnswer(answer, sent: sent, next: limits(), token: token, cancellation: cancellation)
                if round.pending == 0 { return round.storedSyncTime }
                unapplied = nil
                batch = round.next ?? ([], [])
                continue
            }
            // Send `slice` (an empty one too: every cycle asks the server for its changes at least
            // once). Meanwhile apply the previous answer and freeze the batch after `slice`, unless
            // there is nothing to overlap (a single batch: no extra thread hop).
            let body = try syncBody(slice, since: unapplied?.answer.revision)
            let pending = try store.pendingCount()
            let overlap = !slice.isEmpty && (unapplied != nil || pending > slice.count)
            var sent: Result<SyncAnswer, LayerSyncError>
            var prepared: LayerStore.Batch?
            if overlap {
                let previous = unapplied
                let (result, work) = overlapped({ [self] () throws(LayerSyncError) -> SyncAnswer in
                    try postSync(body, token: token, cancellation: cancellation)
                }, { [self] () throws(LayerSyncError) -> LayerStore.Batch? in
                    guard let (answer, sent) = previous else { return try store.nextBatch(limits(inFlight: slice)) }
                    return try applyAnswer(answer, sent: sent, next: limits(inFlight: slice), token: token,
                                           cancellation: cancellation).next
                })
                sent = result
                prepared = try work.get()  // a store failure ends the cycle; the answer in flight is retried later
                unapplied = nil
            } else {
                sent = Result { () throws(LayerSyncError) in try postSync(body, token: token, cancellation: cancellation) }
            }
            var answer: SyncAnswer
            switch sent {
            case .success(let value):
                answer = value
            case .failure(let error) where error.code == .payloadLimitExceeded:
                // 413: halve the batch; a single change over the limit is rejected alone. The
                // batch frozen meanwhile stays queued (frozen) for later rounds.
                guard let halved = try sendHalving(slice, token: token, cancellation: cancellation, budget: &budget) else {
                    batch = try store.nextBatch(limits())
                    continue
                }
                answer = halved
                prepared = nil
            case .failure(let error):
                throw error
            }
            let knownEpoch = try store.epoch()
            if answer.epochChanged || answer.epoch != knownEpoch {
                setActivity(.receivingChanges)
                try rebase(token: token, cancellation: cancellation)
                setActivity(.sendingChanges)
                batch = try store.nextBatch(limits())
                continue
            }
            guard let prepared, !answer.hasMore else {
                // Applied now: there is no next request to overlap with, or the answer's changes
                // continue in pages (`has_more`).
                let round = try applyAnswer(answer, sent: slice, next: limits(), token: token, cancellation: cancellation)
                if round.pending == 0 || slice.isEmpty && batch.oversized.isEmpty { return round.storedSyncTime }
                if answer.hasMore { batch = try store.nextBatch(limits()) } else { batch = round.next ?? ([], []) }
                continue
            }
            // Pipelined: the prepared batch goes out next, and this answer is applied meanwhile.
            unapplied = (answer, slice)
            batch = prepared
        }
        if let (answer, sent) = unapplied { _ = try applyAnswer(answer, sent: sent, next: nil, token: token, cancellation: cancellation) }
        let left = try store.pendingCount()
        guard left == 0 else {
            throw LayerSyncError(.invalidServerData, "the server's answers made no progress for \(Self.maximumStalledRounds) "
                                 + "rounds; \(left) changes stay pending")
        }
        return false
    }

    /// Applies a sync answer in one transaction (plus the delta pages of `has_more`), reports
    /// what changed, and updates the activity state.
    /// - Parameters:
    ///   - answer: The answer.
    ///   - sent: The changes of the request answered (or more).
    ///   - next: Limits of the batch to freeze in the same transaction, if any.
    /// - Returns: The store's round (pending count, next batch, whether `last_sync_time` was stored).
    private func applyAnswer(_ answer: SyncAnswer, sent: [PendingChange], next: LayerStore.BatchLimits?, token: String,
                             cancellation: TransferCancellation) throws(LayerSyncError) -> LayerStore.SyncRound {
        setActivity(.receivingChanges)
        var round = try store.applySyncAnswer(answer, sent: sent, since: answer.hasMore ? nil : answer.revision,
                                              lastSyncTime: answer.hasMore ? nil : Self.wallClockSeconds(),
                                              next: answer.hasMore ? nil : next)
        if answer.hasMore {
            round.outcome.merge(try pullPages(from: answer.nextSince, token: token, cancellation: cancellation))
            round.pending = try store.pendingCount()
        }
        report(round.outcome)
        if round.pending > 0 { setActivity(.sendingChanges) }
        return round
    }

    /// Re-sends a batch that got 413, halving it until the server takes it; a single change
    /// over the limit is rejected alone with `payload_too_large`.
    /// - Parameter budget: The byte budget of later batches, lowered to what was accepted.
    /// - Returns: The answer, or `nil` when nothing of the batch was left to send.
    private func sendHalving(_ batch: [PendingChange], token: String, cancellation: TransferCancellation,
                             budget: inout Int) throws(LayerSyncError) -> SyncAnswer? {
        var slice = batch
        while true {
            if slice.count <= 1 {
                if let change = slice.first { report(try store.dropChange(change, reason: "payload_too_large")) }
                return nil
            }
            slice = Array(slice.prefix(slice.count / 2))
            budget = max(1, slice.reduce(0) { $0 + $1.payload.utf8.count + 1 })
            do {
                return try postSync(try syncBody(slice, since: nil), token: token, cancellation: cancellation)
            } catch where error.code == .payloadLimitExceeded {
                continue
            }
        }
    }

    /// Runs `request` on another thread while `work` runs on this one, and returns when both
    /// ended (so nothing of either is left running when this returns or throws).
    private func overlapped<A: Sendable, B>(_ request: @escaping @Sendable () throws(LayerSyncError) -> A,
                                            _ work: () throws(LayerSyncError) -> B) -> (Result<A, LayerSyncError>, Result<B, LayerSyncError>) {
        let done = DispatchSemaphore(value: 0)
        let box = Mutex<Result<A, LayerSyncError>?>(nil)
        DispatchQueue.global(qos: .userInitiated).async {
            let result = Result { () throws(LayerSyncError) in try request() }
            box.withLock { $0 = result }
            done.signal()
        }
        let local = Result { () throws(LayerSyncError) in try work() }
        done.wait()
        return (box.withLock { $0! }, local)
    }

    /// The exact request body of a batch: `{"client_id","epoch","since","changes":[payloads]}`.
    /// - Parameter since: The `since` to claim, `nil` for the store's.
    /// - Returns: The body, and what it claims and carries (the answer is checked against it).
    private func syncBody(_ changes: [PendingChange], since: Int64?) throws(LayerSyncError) -> (bytes: [UInt8], request: SyncAnswer.Request) {
        let claimed: Int64
        if let since { claimed = since } else { claimed = try store.since() }
        let request = SyncAnswer.Request(epoch: try store.epoch(), since: claimed, changes: changes.map { ($0.changeID, $0.recordID) })
        var body = JSONObject()
        body["client_id"] = .string(try store.clientID())
        body["epoch"] = request.epoch.map { .string($0) } ?? .null
        body["since"] = .integer(request.since)
        var bytes = JSONValue.object(body).jsonBytes
        bytes.removeLast()  // "}"
        bytes.reserveCapacity(bytes.count + 16 + changes.reduce(0) { $0 + $1.payload.utf8.count + 1 })
        bytes.append(contentsOf: ",\"changes\":[".utf8)
        for (offset, change) in changes.enumerated() {
            if offset > 0 { bytes.append(UInt8(ascii: ",")) }
            bytes.append(contentsOf: change.payload.utf8)  // frozen payloads go out byte-identical
        }
        bytes.append(contentsOf: "]}".utf8)
        return (bytes, request)
    }

    /// Posts a request body built by ``syncBody(_:since:)``.
    private func postSync(_ body: (bytes: [UInt8], request: SyncAnswer.Request), token: String,
                          cancellation: TransferCancellation) throws(LayerSyncError) -> SyncAnswer {
        try context.server.sync(documentID: documentID, layer: layerName, body: body.bytes, request: body.request, jwt: token,
                                session: workSession, cancellation: cancellation)
    }

    /// Pulls delta pages (`GET records?since=`) until the server has no more.
    func pullPages(from since: Int64, token: String, cancellation: TransferCancellation) throws(LayerSyncError) -> ServerChangeOutcome {
        var outcome = ServerChangeOutcome()
        var since = since
        while true {
            let page = try context.server.records(documentID: documentID, layer: layerName, since: since, epoch: try store.epoch(), jwt: token,
                                                  session: workSession, cancellation: cancellation)
            outcome.merge(try store.applyServerRecords(page.records, since: page.hasMore ? page.nextSince : page.revision))
            guard page.hasMore, page.nextSince > since else { return outcome }
            since = page.nextSince
        }
    }

    /// Downloads a full snapshot (`since=0`, paged) into the store: each page is staged as it
    /// arrives, then the whole snapshot replaces the server side of the store in one
    /// transaction (``LayerStore/finishSnapshot(epoch:revision:reportChanges:)``). The next
    /// page is requested (and parsed) on another thread while this one stages the current
    /// page, so the server's time and the store's overlap; memory stays bounded by two pages.
    /// A failure before the end leaves the store as it was.
    /// - Parameter reportChanges: Whether the outcome lists the visible changes.
    /// - Returns: What changed locally and the snapshot's epoch.
    func downloadSnapshot(token: String, cancellation: TransferCancellation,
                          reportChanges: Bool) throws(LayerSyncError) -> (outcome: ServerChangeOutcome, epoch: String) {
        try store.beginSnapshot()
        var since: Int64 = 0
        var page = try context.server.records(documentID: documentID, layer: layerName, since: since, jwt: token,
                                              session: workSession, cancellation: cancellation)
        while true {
            let next: PageFetch? = page.hasMore && page.nextSince > since ? fetchPage(since: page.nextSince, token: token,
                                                                                       cancellation: cancellation) : nil
            do throws(LayerSyncError) {
                try store.stageSnapshotPage(page.records)
            } catch {
                // Never return while the prefetch still uses the session.
                _ = next?.wait()
                throw error
            }
            guard let next else {
                let outcome = try store.finishSnapshot(epoch: page.epoch, revision: page.revision, reportChanges: reportChanges)
                // The snapshot was filtered for this token's collaboration permissions.
                if let claims = claims(of: token) {
                    try store.setAppliedGrant(permissions: claims.collaboration?.entries, userID: claims.userID)
                }
                return (outcome, page.epoch)
            }
            since = page.nextSince
            page = try next.wait().get()
        }
    }

    /// Starts `GET records?since=` (and the page's parsing) on a global queue.
    private func fetchPage(since: Int64, token: String, cancellation: TransferCancellation) -> PageFetch {
        let fetch = PageFetch()
        DispatchQueue.global().async { [self] in
            fetch.finish(Result { () throws(LayerSyncError) in
                try context.server.records(documentID: documentID, layer: layerName, since: since, jwt: token,
                                           session: workSession, cancellation: cancellation)
            })
        }
        return fetch
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
            guard state.authentication.noteRejection(of: token) else { return false }
            state.syncCycle.disarmDebounceTimer()
            return true
        }
        guard first else { return }
        emit(.didFailAuthentication(self, error.with(documentID: documentID)))
        emit(.requestToken(self))
    }
}

/// One page request running on another thread (``DocumentDescriptor/downloadSnapshot(token:cancellation:reportChanges:)``).
final class PageFetch: Sendable {
    private let result = Mutex<Result<LayerPage, LayerSyncError>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    /// Records the outcome and wakes ``wait()``.
    func finish(_ outcome: Result<LayerPage, LayerSyncError>) {
        result.withLock { $0 = outcome }
        done.signal()
    }

    /// Blocks until the request has ended; returns its outcome.
    func wait() -> Result<LayerPage, LayerSyncError> {
        done.wait()
        return result.withLock { $0! }
    }
}
