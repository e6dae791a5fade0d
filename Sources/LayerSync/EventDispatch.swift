import CLayerSync
import LayerSyncCore
import LayerSyncModel

/// Translates the core's ``ClientEvent``s into calls of the host's
/// `layersync_client_delegate`. Runs on the core's serial event queue, which the core
/// never enters while holding an engine lock, so callbacks may call back into the API.
extension ClientHandle {
    func deliver(_ event: ClientEvent) {
        deliverToDelegate(event)
        deliverToObservers(event)
    }

    private func deliverToDelegate(_ event: ClientEvent) {
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
        case .downloadProgress(let descriptor, let done, let total):
            table.download_progress?(context, handle(for: descriptor).opaque, done, total)
        case .didFinishDownload(let descriptor):
            table.did_finish_download?(context, handle(for: descriptor).opaque)
        case .didFailDownload(let descriptor, let failure):
            call(table.did_fail_download, descriptor, failure)
        case .didBeginSync(let descriptor):
            table.did_begin_sync?(context, handle(for: descriptor).opaque)
        case .didChangeSyncState(let descriptor, let state):
            table.did_change_sync_state?(
                context, handle(for: descriptor).opaque,
                layersync_document_state_t(rawValue: UInt32(state.rawValue)))
        case .didFinishSync(let descriptor):
            table.did_finish_sync?(context, handle(for: descriptor).opaque)
        case .didFailSync(let descriptor, let failure):
            call(table.did_fail_sync, descriptor, failure)
        case .didReceiveChanges(let descriptor, let changes):
            call(table.did_receive_changes, descriptor, EventPayload.json(changes))
        case .didRejectChanges(let descriptor, let rejected):
            call(table.did_reject_changes, descriptor, EventPayload.json(rejected))
        case .didFailAuthentication(let descriptor, let failure):
            call(table.did_fail_authentication, descriptor, failure)
        case .didFinishReauthentication(let descriptor, let jwt):
            call(table.did_finish_reauthentication, descriptor, jwt)
        case .didFailReauthentication(let descriptor, let failure):
            call(table.did_fail_reauthentication, descriptor, failure)
        case .didResetLayer(let descriptor, let failure):
            call(table.did_reset_layer, descriptor, failure)
        case .requestToken(let descriptor):
            table.request_token?(context, handle(for: descriptor).opaque)
        }
    }

    private func call(_ callback: layersync_document_error_cb?, _ descriptor: DocumentDescriptor, _ failure: LayerSyncError) {
        guard let callback else { return }
        let document = handle(for: descriptor).opaque
        ErrorBridge.withTemporary(failure) { callback(delegate.table.context, document, $0) }
    }

    private func call(_ callback: layersync_document_string_cb?, _ descriptor: DocumentDescriptor, _ value: String) {
        guard let callback else { return }
        let document = handle(for: descriptor).opaque
        value.withCString { callback(delegate.table.context, document, $0) }
    }

    /// Calls the matching field of every observer of the event's document, in the order
    /// they were added (a snapshot: observers added meanwhile see later events).
    private func deliverToObservers(_ event: ClientEvent) {
        guard let descriptor = event.descriptor else { return }
        let document = handle(for: descriptor)
        let observers = document.observers.withLock { $0 }
        guard !observers.isEmpty else { return }
        let pointer = document.opaque
        for observer in observers {
            observer.invoke { table in
                let context = table.context
                func failure(_ callback: layersync_document_error_cb?, _ error: LayerSyncError) {
                    guard let callback else { return }
                    ErrorBridge.withTemporary(error) { callback(context, pointer, $0) }
                }
                func text(_ callback: layersync_document_string_cb?, _ value: String) {
                    guard let callback else { return }
                    value.withCString { callback(context, pointer, $0) }
                }
                switch event {
                case .serverDidValidate: break
                case .downloadProgress(_, let done, let total): table.download_progress?(context, pointer, done, total)
                case .didFinishDownload: table.did_finish_download?(context, pointer)
                case .didFailDownload(_, let error): failure(table.did_fail_download, error)
                case .didBeginSync: table.did_begin_sync?(context, pointer)
                case .didChangeSyncState(_, let state):
                    table.did_change_sync_state?(context, pointer, layersync_document_state_t(rawValue: UInt32(state.rawValue)))
                case .didFinishSync: table.did_finish_sync?(context, pointer)
                case .didFailSync(_, let error): failure(table.did_fail_sync, error)
                case .didReceiveChanges(_, let changes): text(table.did_receive_changes, EventPayload.json(changes))
                case .didRejectChanges(_, let rejected): text(table.did_reject_changes, EventPayload.json(rejected))
                case .didFailAuthentication(_, let error): failure(table.did_fail_authentication, error)
                case .didFinishReauthentication(_, let jwt): text(table.did_finish_reauthentication, jwt)
                case .didFailReauthentication(_, let error): failure(table.did_fail_reauthentication, error)
                case .didResetLayer(_, let error): failure(table.did_reset_layer, error)
                case .requestToken: table.request_token?(context, pointer)
                }
            }
        }
    }
}

extension ClientEvent {
    /// The document a per-document event concerns (nil for `serverDidValidate`).
    var descriptor: DocumentDescriptor? {
        switch self {
        case .serverDidValidate: nil
        case .downloadProgress(let d, _, _), .didFinishDownload(let d), .didFailDownload(let d, _), .didBeginSync(let d),
             .didChangeSyncState(let d, _), .didFinishSync(let d), .didFailSync(let d, _), .didReceiveChanges(let d, _),
             .didRejectChanges(let d, _), .didFailAuthentication(let d, _), .didFinishReauthentication(let d, _),
             .didFailReauthentication(let d, _), .didResetLayer(let d, _), .requestToken(let d):
            d
        }
    }
}
