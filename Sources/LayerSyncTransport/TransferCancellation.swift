import CCurl
import LayerSyncModel
import Synchronization

/// Cancels HTTP transfers promptly from any thread: `cancel()` sets a flag and wakes the
/// `curl_multi_poll` of the transfer currently attached, which then aborts.
/// One token may serve a sequence of transfers (a download, a long-poll loop).
package final class TransferCancellation: Sendable {
    private struct State {
        var cancelled = false
        /// The multi handle of the running transfer; only woken while attached (under the lock).
        var multi: UncheckedSendable<UnsafeMutableRawPointer>?
    }

    private let state = Mutex(State())

    /// A token that is not cancelled.
    package init() {}

    /// Whether `cancel()` has been called.
    var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Cancels the running and every later transfer using this token.
    package func cancel() {
        state.withLock { state in
            state.cancelled = true
            if let multi = state.multi { curl_multi_wakeup(multi.value) }
        }
    }

    /// Attaches a running transfer's multi handle.
    /// - Parameter multi: The handle.
    /// - Returns: `false` if the token is already cancelled (do not start).
    func attach(_ multi: UnsafeMutableRawPointer) -> Bool {
        state.withLock { state in
            guard !state.cancelled else { return false }
            state.multi = UncheckedSendable(multi)
            return true
        }
    }

    /// Detaches the multi handle before it is cleaned up.
    func detach() {
        state.withLock { $0.multi = nil }
    }
}
