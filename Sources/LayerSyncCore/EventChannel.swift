import Dispatch
import Synchronization

/// Delivers a client's events in order on one serial background queue.
///
/// `emit` only enqueues (it never calls the handler), so it may be called while the
/// engine holds a lock; the handler itself always runs on the queue with no engine lock
/// held, so it may call back into the API. `close()` stops new events and waits until
/// every event already enqueued has been delivered.
final class EventChannel: Sendable {
    private let queue: DispatchQueue
    private let handler: @Sendable (ClientEvent) -> Void
    private let accepting = Mutex(true)
    private let key: UncheckedSendable<DispatchSpecificKey<UInt8>>

    /// Creates a channel.
    /// - Parameters:
    ///   - label: The queue label.
    ///   - handler: Called once per event, on the queue.
    init(label: String, handler: @escaping @Sendable (ClientEvent) -> Void) {
        queue = DispatchQueue(label: label)
        self.handler = handler
        let key = DispatchSpecificKey<UInt8>()
        queue.setSpecific(key: key, value: 1)
        self.key = UncheckedSendable(key)
    }

    /// Whether the caller runs on this channel's queue (inside the event handler).
    var isCurrent: Bool { DispatchQueue.getSpecific(key: key.value) != nil }

    /// Enqueues an event unless the channel is closed.
    /// - Parameter event: The event.
    func emit(_ event: ClientEvent) {
        accepting.withLock { accepting in
            guard accepting else { return }
            let handler = self.handler
            queue.async { handler(event) }
        }
    }

    /// Stops accepting events and waits until the already enqueued ones are delivered.
    /// Must not be called on the channel's queue.
    func close() {
        accepting.withLock { $0 = false }
        queue.sync {}
    }
}
