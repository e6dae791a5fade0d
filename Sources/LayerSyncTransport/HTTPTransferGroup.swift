import CCurl
import LayerSyncModel
import Synchronization

/// Long transfers driven by one thread: the client's listener thread holds its change stream
/// on it (`StreamListener`: one at a time; the next one starts when it ended). One multi
/// handle for all of them (its connection cache too), one easy handle per running transfer,
/// configured as ``HTTPSession`` configures its one (``HTTPTransfer``).
///
/// Threading: ``start(_:cancellation:completion:)`` and ``drive(upToSeconds:)`` are called on
/// the driving thread only, and completions run there; ``wakeUp()`` and a transfer's
/// ``TransferCancellation/cancel()`` may be called from any thread (each wakes the poll).
package final class HTTPTransferGroup: Sendable {
    private struct Running {
        let transfer: UncheckedSendable<HTTPTransfer>
        let completion: @Sendable (Result<HTTPResponse, LayerSyncError>) -> Void
    }

    /// Used on the driving thread only (`curl_multi_wakeup`, from any thread, excepted).
    private let multi: UncheckedSendable<UnsafeMutableRawPointer>
    /// The running transfers by their easy handle's address (the driving thread's; the lock
    /// makes the type Sendable).
    private let running = Mutex<[UInt: Running]>([:])
    private let connectTimeoutSeconds: Double

    /// Creates an empty group.
    /// - Parameter connectTimeoutSeconds: Seconds allowed to establish each connection.
    package init(connectTimeoutSeconds: Double) {
        HTTPSession.globalInit
        self.connectTimeoutSeconds = connectTimeoutSeconds
        multi = UncheckedSendable(curl_multi_init()!)
    }

    deinit {
        for easy in running.withLock({ $0.values.map(\.transfer.value.easy) }) {
            curl_multi_remove_handle(multi.value, easy)
            curl_easy_cleanup(easy)
        }
        curl_multi_cleanup(multi.value)
    }

    /// How many transfers run.
    package var count: Int { running.withLock { $0.count } }

    /// Starts `request` (on the driving thread); it runs while ``drive(upToSeconds:)`` is
    /// called, and `completion` gets its answer (any status) or its error there:
    /// `.cancelled`, `.requestFailed` when no answer arrived.
    func start(_ request: HTTPRequest, cancellation: TransferCancellation,
               completion: @escaping @Sendable (Result<HTTPResponse, LayerSyncError>) -> Void) {
        guard cancellation.attach(multi.value) else {
            completion(.failure(LayerSyncError(.cancelled, "cancelled")))
            return
        }
        let easy = curl_easy_init()!
        let transfer = HTTPTransfer(request, easy: easy, connectTimeout: connectTimeoutSeconds, cancellation: cancellation)
        running.withLock { $0[UInt(bitPattern: easy)] = Running(transfer: UncheckedSendable(transfer), completion: completion) }
        curl_multi_add_handle(multi.value, easy)
    }

    /// Moves the running transfers on, waiting up to `seconds` for something to happen
    /// (``wakeUp()`` and a cancellation end the wait), then calls the completions of those
    /// that ended (on this thread). Returns at once when a transfer ended.
    package func drive(upToSeconds seconds: Double) {
        var active: Int32 = 0
        curl_multi_perform(multi.value, &active)
        var ended: [(Running, Result<HTTPResponse, LayerSyncError>)] = []
        var easy: UnsafeMutableRawPointer?
        var code = CURLE_OK
        while ls_curl_multi_done(multi.value, &easy, &code) == 1, let done = easy {
            if let end = end(done, { (transfer: HTTPTransfer) throws(LayerSyncError) in try transfer.finish(code) }) { ended.append(end) }
        }
        // A cancelled transfer ends at once (its progress callback would abort it at its next call).
        let cancelled = running.withLock { $0.values.filter { $0.transfer.value.cancellation.isCancelled }.map(\.transfer.value.easy) }
        for done in cancelled {
            if let end = end(done, { (_: HTTPTransfer) throws(LayerSyncError) -> HTTPResponse in
                throw LayerSyncError(.cancelled, "cancelled")
            }) { ended.append(end) }
        }
        if ended.isEmpty {
            curl_multi_poll(multi.value, nil, 0, Int32(max(0, min(seconds, 3600)) * 1000), nil)
            return
        }
        for (running, result) in ended { running.completion(result) }
    }

    /// Wakes a ``drive(upToSeconds:)`` that waits (any thread).
    package func wakeUp() { curl_multi_wakeup(multi.value) }

    /// Takes the transfer of `easy` out of the group with its result (`nil` if not one of its).
    private func end(_ easy: UnsafeMutableRawPointer, _ result: (HTTPTransfer) throws(LayerSyncError) -> HTTPResponse)
        -> (Running, Result<HTTPResponse, LayerSyncError>)? {
        guard let found = running.withLock({ $0.removeValue(forKey: UInt(bitPattern: easy)) }) else { return nil }
        let transfer = found.transfer.value
        curl_multi_remove_handle(multi.value, easy)
        transfer.cancellation.detach()
        let outcome = Result { () throws(LayerSyncError) in try result(transfer) }
        curl_easy_cleanup(easy)
        return (found, outcome)
    }
}
