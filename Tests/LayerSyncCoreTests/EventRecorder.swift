import Foundation
import Synchronization
@testable import LayerSyncCore
@testable import LayerSyncModel

/// Records a client's events and waits for them with a timeout (never sleeps as an assertion).
final class EventRecorder: Sendable {
    private let events = Mutex<[ClientEvent]>([])
    private let signal = DispatchSemaphore(value: 0)

    /// The handler to give to `SyncClient`.
    var handler: @Sendable (ClientEvent) -> Void {
        { [self] event in
            events.withLock { $0.append(event) }
            signal.signal()
        }
    }

    /// All events so far.
    var all: [ClientEvent] { events.withLock { $0 } }

    /// Forgets recorded events.
    func reset() { events.withLock { $0.removeAll() } }

    /// Waits until an event (recorded at index ≥ `after`) matches, returning the extracted value.
    /// - Returns: The value, or `nil` on timeout.
    func wait<T>(timeout: Double = 20, after start: Int = 0, _ match: (ClientEvent) -> T?) -> T? {
        let deadline = Date().addingTimeInterval(timeout)
        var checked = start
        while true {
            let snapshot = all
            while checked < snapshot.count {
                if let value = match(snapshot[checked]) { return value }
                checked += 1
            }
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 { return nil }
            _ = signal.wait(timeout: .now() + min(remaining, 0.2))
        }
    }

    var count: Int { events.withLock { $0.count } }

    // Convenience matchers.

    func waitForValidation(timeout: Double = 20) -> Result<ServerInfo, LayerSyncError>? {
        wait(timeout: timeout) { if case .serverDidValidate(let result) = $0 { return result }; return nil }
    }

    func waitForDownload(_ document: DocumentDescriptor, timeout: Double = 30) -> LayerSyncError?? {
        wait(timeout: timeout) { event -> LayerSyncError?? in
            switch event {
            case .didFinishDownload(let d) where d === document: return .some(nil)
            case .didFailDownload(let d, let error) where d === document: return .some(error)
            default: return nil
            }
        }
    }

    /// Waits for the end of a sync cycle after event index `after`: `nil` error = finished.
    func waitForSyncEnd(_ document: DocumentDescriptor, after: Int, timeout: Double = 30) -> LayerSyncError?? {
        wait(timeout: timeout, after: after) { event -> LayerSyncError?? in
            switch event {
            case .didFinishSync(let d) where d === document: return .some(nil)
            case .didFailSync(let d, let error) where d === document: return .some(error)
            default: return nil
            }
        }
    }
}
