import CLayerSync
import LayerSyncCore
import LayerSyncModel

/// Translates the core's ``ClientEvent``s into calls of the host's
/// `layersync_client_delegate` and of the document's observers. Runs on the core's serial
/// event queue, which the core never enters while holding an engine lock, so callbacks may
/// call back into the API. The per-document events are dispatched by
/// `DocumentEventTable.deliver(_:document:)` (EventDispatch+Generated.swift, generated from
/// api/layersync.toml); only the client's own events are written here.
extension ClientHandle {
    func deliver(_ event: ClientEvent) {
        guard let descriptor = event.descriptor else {
            deliverClientEvent(event)
            return
        }
        let document = handle(for: descriptor)
        delegate.table.deliver(event, document: document.opaque)
        deliverToObservers(event, document)
    }

    private func deliverClientEvent(_ event: ClientEvent) {
        let table = delegate.table
        let context = table.context
        switch event {
        case .serverDidValidate(.success(let info)):
            table.server_did_validate.map { callback in
                info.json.withCString { callback(context, $0, nil) }
            }
        case .serverDidValidate(.failure(let failure)):
            table.server_did_validate.map { callback in
                ErrorBridge.withTemporary(failure) { callback(context, nil, $0) }
            }
        default:
            assertionFailure("\(event) is a per-document event")
        }
    }

    /// Calls the matching field of every observer of the event's document, in the order
    /// they were added (a snapshot: observers added meanwhile see later events).
    private func deliverToObservers(_ event: ClientEvent, _ document: DocumentHandle) {
        let observers = document.observers.withLock { $0 }
        guard !observers.isEmpty else { return }
        let pointer = document.opaque
        for observer in observers {
            observer.invoke { table in table.deliver(event, document: pointer) }
        }
    }
}
