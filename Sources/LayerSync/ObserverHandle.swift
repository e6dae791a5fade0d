import CLayerSync
import LayerSyncCore

/// What a `layersync_observer *` points to: a copied `layersync_document_observer` and the
/// gate that makes removal wait for (or defer behind) a running callback. Retained by the
/// pointer handed to C and by its document's observer list until removed.
final class ObserverHandle: Sendable {
    let table: ObserverTable
    let gate = CallbackGate()
    /// The observed document (the reference cycle through its observer list is broken on removal).
    let document: DocumentHandle

    init(table: layersync_document_observer, document: DocumentHandle) {
        self.table = ObserverTable(table: table)
        self.document = document
    }

    var opaque: OpaquePointer { OpaquePointer(Unmanaged.passUnretained(self).toOpaque()) }

    /// The handle behind a `layersync_observer *` (NULL gives nil).
    static func from(_ pointer: OpaquePointer?) -> ObserverHandle? {
        pointer.map { Unmanaged<ObserverHandle>.fromOpaque(UnsafeRawPointer($0)).takeUnretainedValue() }
    }

    /// Calls `body` with the table unless the observer was removed; runs `release_context`
    /// afterwards if the callback removed its own observer.
    func invoke(_ body: (layersync_document_observer) -> Void) {
        guard gate.enter() else { return }
        body(table.table)
        if gate.leave() { releaseContext() }
    }

    /// Stops callbacks; see `layersync_observer_remove`.
    /// - Parameter onCallbackThread: Whether the caller runs on the client's callback thread.
    func remove(onCallbackThread: Bool) {
        if gate.remove(wait: !onCallbackThread) == .releaseNow { releaseContext() }
    }

    private func releaseContext() {
        table.table.release_context?(table.table.context)
    }
}
