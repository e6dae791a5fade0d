import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Delivers a client's events in order on one dedicated background thread.
///
/// docs/architecture.md §6 promises that all callbacks of a client run on *one* serial
/// background thread. A serial `DispatchQueue` alone does not give that (its blocks hop
/// between pool threads), so the channel runs one long-lived loop on its queue: the loop
/// occupies a single thread for the client's lifetime and takes events from a FIFO.
///
/// `emit` only enqueues (it never calls the handler), so it may be called while the
/// engine holds a lock; the handler always runs on the channel's thread with no engine
/// lock held, so it may call back into the API. `close()` stops new events and waits
/// until every event already enqueued has been delivered.
final class EventChannel: Sendable {
    /// An event for the handler, or a completion to run on the channel's thread.
    private enum Item: Sendable {
        case event(ClientEvent)
        case work(@Sendable () -> Void)
    }

    private struct Backlog {
        var events: [Item] = []
        var head = 0
        var accepting = true

        mutating func popFirst() -> Item? {
            guard head < events.count else { return nil }
            let event = events[head]
            head += 1
            // Delivered events must not stay referenced: they hold descriptors, which hold the
            // client context, which holds this channel (a cycle that would leak the client).
            if head == events.count {
                events.removeAll(keepingCapacity: true)
                head = 0
            } else if head > 64, head * 2 > events.count {  // compact now and then
                events.removeFirst(head)
                head = 0
            }
            return event
        }
    }

    private let handler: @Sendable (ClientEvent) -> Void
    private let backlog = Mutex(Backlog())
    /// Signalled once per enqueued event, and once more by `close()` to end the loop.
    private let available = DispatchSemaphore(value: 0)
    private let drained = DispatchSemaphore(value: 0)
    private let thread = Mutex<pthread_t?>(nil)

    /// Creates a channel and starts its thread.
    /// - Parameters:
    ///   - label: The label of the thread's queue (shows in debuggers).
    ///   - handler: Called once per event, on the channel's thread.
    init(label: String, handler: @escaping @Sendable (ClientEvent) -> Void) {
        self.handler = handler
        let started = DispatchSemaphore(value: 0)
        DispatchQueue(label: label).async { [self] in
            thread.withLock { $0 = pthread_self() }
            started.signal()
            run()
        }
        started.wait()  // so that `isCurrent` is exact from the first event on
    }

    private func run() {
        while true {
            available.wait()
            guard let item = backlog.withLock({ $0.popFirst() }) else { break }  // close() signal
            switch item {
            case .event(let event): handler(event)
            case .work(let work): work()
            }
        }
        drained.signal()
    }

    /// Whether the caller runs on this channel's thread (inside the event handler).
    var isCurrent: Bool {
        thread.withLock { $0.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
    }

    /// Enqueues an event unless the channel is closed.
    /// - Parameter event: The event.
    func emit(_ event: ClientEvent) {
        enqueue(.event(event))
    }

    /// Runs `work` on the channel's thread, in order with the events (used for the
    /// completions of one-shot server operations). Dropped if the channel is closed.
    /// - Parameter work: The work.
    func perform(_ work: @escaping @Sendable () -> Void) {
        enqueue(.work(work))
    }

    private func enqueue(_ item: Item) {
        let queued = backlog.withLock { backlog in
            guard backlog.accepting else { return false }
            backlog.events.append(item)
            return true
        }
        if queued { available.signal() }
    }

    /// Stops accepting events and waits until the already enqueued ones are delivered.
    /// Idempotent. Must not be called on the channel's thread.
    func close() {
        let first = backlog.withLock { backlog in
            defer { backlog.accepting = false }
            return backlog.accepting
        }
        guard first else { return }
        available.signal()
        drained.wait()
    }
}
