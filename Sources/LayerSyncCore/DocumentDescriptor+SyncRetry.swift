import Dispatch
import LayerSyncModel
import LayerSyncTransport

/// Retrying after a server answer that failed the checks of the model decoders
/// (`.invalidServerData`, protocol.md "What a client checks") or a server error (5xx): nothing
/// of such an answer was applied, so the sync cycle runs again by itself, after a pause that grows like the
/// long-poll's (capped exponential backoff with full jitter), until the server answers
/// correctly again. Never a tight loop.
extension DocumentDescriptor {
    /// A pause after `failures` failures in a row: uniformly random in 0...min(30 s, 0.5 s · 2^failures)
    /// (full jitter), shared by the long-poll loop and the sync retry.
    /// - Parameter failures: Failures in a row, ≥ 1.
    /// - Returns: Seconds to wait.
    static func backoffSeconds(failures: Int) -> Double {
        let ceiling = min(maximumBackoffSeconds, initialBackoffSeconds * Double(1 << min(max(failures, 1), 16)))
        return Double.random(in: 0...ceiling)
    }

    /// Whether a sync cycle that ended with `error` is retried by the retry timer: an answer
    /// the checks refused (`.invalidServerData`), or a server error (HTTP 5xx, which the
    /// transport maps to `.requestFailed` with the status). A failure without any HTTP answer
    /// (offline, connection refused or reset) waits for the network to come back, a local
    /// edit or a long-poll answer instead (docs/threading.md §8); auth failures wait for
    /// reauthentication.
    static func isRetriedWithBackoff(_ error: LayerSyncError) -> Bool {
        if error.code == .invalidServerData { return true }
        return error.code == .requestFailed && (error.httpStatus ?? 0) >= 500
    }

    /// Called at the end of every sync cycle: after an answer the checks refused or a 5xx, schedules the
    /// next cycle with backoff (when automatic sync is on and the token was not refused;
    /// ``stopSyncing(cancelCurrentRequest:)`` and a new edit's debounce cancel it, like the
    /// debounce timer); any other outcome resets the count of failures in a row.
    /// - Parameter error: How the cycle ended, `nil` for success.
    func noteSyncCycleEnded(_ error: LayerSyncError?) {
        guard let error, Self.isRetriedWithBackoff(error), !context.isShutDown else {
            mutableState.withLock { $0.syncCycle.resetInvalidAnswers() }
            return
        }
        let armed = mutableState.withLock { state -> (generation: Int, delay: Double)? in
            let failures = state.syncCycle.noteInvalidAnswer()
            guard state.syncCycle.isAutomatic, !state.authentication.isTokenRejected else { return nil }
            return state.syncCycle.armRetryTimer(delay: Self.backoffSeconds(failures: failures))
        }
        guard let (generation, delay) = armed else { return }
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
            guard mutableState.withLock({ $0.syncCycle.isArmedDebounceTimer(generation) }) else { return }
            requestSyncCycle()
        }
    }
}

/// A cursor ahead of the server's layer. An answer that claims a layer revision far above the
/// real one (2^63-1, say) passes every check of its own and moves `since` there; each correct
/// answer after it then has a revision below the `since` sent and is refused (protocol.md "What
/// a client checks"), for good: retrying cannot help. So after an answer the checks refused,
/// the layer's revision is asked for once more (`GET records?since=0&limit=1`, the smallest
/// snapshot page); when it carries the epoch held and a revision below the cursor, the
/// cursor is wrong, not the answer, and the layer is re-based on the server's snapshot
/// (pending changes kept), as for an epoch change.
extension DocumentDescriptor {
    /// After `error`, re-bases the layer when its cursor is ahead of the server's layer. Call
    /// on the work queue.
    /// - Returns: Whether it re-based (the failed request can be made again at once).
    /// - Throws: The errors of the check request and of the re-base.
    func rebaseIfCursorIsAheadOfServer(after error: LayerSyncError, token: String,
                                       cancellation: TransferCancellation) throws(LayerSyncError) -> Bool {
        guard error.code == .invalidServerData, let held = try store.epoch() else { return false }
        let since = try store.since()
        guard since > 0 else { return false }
        let check = try context.server.records(documentID: documentID, layer: layerName, since: 0, epoch: held,
                                               limit: 1, jwt: token, session: workSession, cancellation: cancellation)
        guard check.epoch == held, check.revision < since else { return false }
        try rebase(token: token, cancellation: cancellation)
        return true
    }
}
