import CLayerSync
import LayerSyncCore

/// Translates the core's ``ClientEvent``s into calls of the host's
/// `layersync_client_delegate`. Runs on the core's serial event queue, which the core
/// never enters while holding an engine lock, so callbacks may call back into the API.
extension ClientHandle {
    func deliver(_ event: ClientEvent) {
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
}
