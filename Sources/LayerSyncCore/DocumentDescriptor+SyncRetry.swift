import Dispatch
import LayerSyncModel

/// Retrying after a server answer that failed the checks of the model decoders
/// (`.invalidServerData`, protocol.md "What a client checks"): nothing of such an answer was
/// applied, so the sync cycle runs again by itself, after a pause that grows like the
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

    /// Called at the end of every sync cycle: after an answer the checks refused, schedules the
    /// next cycle with backoff (when automatic sync is on and the token was not refused;
    /// ``stopSyncing(cancelCurrentRequest:)`` and a new edit's debounce cancel it, like the
    /// debounce timer); any other outcome resets the count of failures in a row.
    /// - Parameter error: How the cycle ended, `nil` for success.
    func noteSyncCycleEnded(_ error: LayerSyncError?) {
        guard let error, error.code == .invalidServerData, !context.isShutDown else {
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
