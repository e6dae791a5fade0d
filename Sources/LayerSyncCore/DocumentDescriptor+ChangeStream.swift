import Dispatch
import LayerSyncModel
import LayerSyncTransport

/// What the client's change stream (``StreamListener``) does to this layer. Each runs on the
/// work queue (as a long-poll answer does) through the code the long-poll and the sync cycle
/// use: ``applyLongPollPage(_:token:cancellation:)`` for a page, ``pullPages(from:token:cancellation:)``
/// for a gap, ``rebase(token:cancellation:)`` for a new epoch.
extension DocumentDescriptor {
    /// Whether the server refused the token in use.
    var isTokenRejected: Bool { mutableState.withLock { $0.authentication.isTokenRejected } }

    /// A `changes` event: applied when it follows the layer's committed cursor; a page that
    /// does not (the cursor moved meanwhile: a sync answer, a fetch) is fetched from the
    /// cursor instead when it holds anything newer. Never a gap, never a record twice.
    func applyStreamedPage(_ json: JSONValue, since: Int64, generation: Int) {
        guard isCurrentListener(generation) else { return }
        let token = jwt
        do throws(LayerSyncError) {
            let cursor = try store.since()
            if since == cursor {
                let page = try LayerPage(json: json, since: cursor, epoch: try store.epoch())
                try applyLongPollPage(page, token: token, cancellation: context.lifetime)
            } else if since > cursor || (json["revision"]?.int64Value ?? 0) > cursor {
                try fetchChanges(token: token)
            }
        } catch {
            streamWorkFailed(error, token: token, generation: generation)
        }
    }

    /// A `notice` (changes the stream did not carry), or a page that failed: `GET records`
    /// from the cursor, then on with the stream.
    func fetchStreamGap(generation: Int, attempt: Int = 0) {
        guard isCurrentListener(generation) else { return }
        let token = jwt
        do throws(LayerSyncError) {
            try fetchChanges(token: token)
        } catch {
            streamWorkFailed(error, token: token, generation: generation, attempt: attempt)
        }
    }

    /// A `reset` (the layer's epoch is not the one subscribed with): re-based as for a long-poll
    /// answer with a new epoch, then subscribed again from the new snapshot's cursor.
    func rebaseFromStream(generation: Int) {
        guard isCurrentListener(generation) else { return }
        let token = jwt
        do throws(LayerSyncError) {
            try rebase(token: token, cancellation: context.lifetime)
            publishState()
            if hasUnsyncedChanges { scheduleAutoSync() }
            context.stream.resubscribe(self)
        } catch {
            streamWorkFailed(error, token: token, generation: generation)
        }
    }

    /// A subscription answer the checks refused (``SubscriptionAnswer/cursorAhead``: its layer
    /// revision is below the cursor subscribed from), handled as a refused page.
    func streamAnswerRefused(_ error: LayerSyncError, generation: Int) {
        guard isCurrentListener(generation) else { return }
        streamWorkFailed(error, token: jwt, generation: generation)
    }

    /// The changes after the committed cursor, page by page: the first page goes through
    /// ``applyLongPollPage(_:token:cancellation:)`` (it re-bases on a new epoch), the rest
    /// through the sync cycle's ``pullPages(from:token:cancellation:)``.
    private func fetchChanges(token: String) throws(LayerSyncError) {
        let held = try store.epoch()
        let page = try context.server.records(documentID: documentID, layer: layerName, since: try store.since(), epoch: held,
                                              jwt: token, session: workSession, cancellation: context.lifetime)
        try applyLongPollPage(page, token: token, cancellation: context.lifetime)
        if page.hasMore, page.epoch == held {
            report(try pullPages(from: page.nextSince, token: token, cancellation: context.lifetime))
            publishState()
        }
    }

    /// A failure of stream work on the work queue, handled as the long-poll loop handles it: an
    /// auth failure or a missing layer stops listening (reported once); an answer the checks
    /// refused re-bases a cursor ahead of the server, as a long-poll does
    /// (``rebaseIfCursorIsAheadOfServer(after:token:cancellation:)``), and subscribes again from
    /// the new cursor; anything else is fetched again after a backoff (the next event that does
    /// not follow the cursor fetches it too).
    private func streamWorkFailed(_ error: LayerSyncError, token: String, generation: Int, attempt: Int = 0) {
        if error.code == .cancelled { return }
        if error.code == .accessDenied && error.httpStatus != nil {
            context.stream.forget(self, generation: generation)
            streamFailedAuthentication(error, token: token, generation: generation)
            return
        }
        if error.code == .invalidDocument && error.httpStatus == 404 {
            context.stream.forget(self, generation: generation)
            streamLayerIsMissing(error, generation: generation)
            return
        }
        if error.code == .invalidServerData, (try? rebaseIfCursorIsAheadOfServer(after: error, token: token, cancellation: context.lifetime)) == true {
            publishState()
            if hasUnsyncedChanges { scheduleAutoSync() }
            context.stream.resubscribe(self)
            return
        }
        let delay = Self.backoffSeconds(failures: attempt + 1)
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
            workQueue.async { [self] in fetchStreamGap(generation: generation, attempt: attempt + 1) }
        }
    }

    /// The server refused this layer's token for the stream (401/403, or `unsubscribed` with
    /// `token_expired`/`token_revoked`/`forbidden`): listening stops until a reauthentication
    /// succeeds, and `didFailAuthentication` is reported once for the token.
    func streamFailedAuthentication(_ error: LayerSyncError, token: String, generation: Int) {
        mutableState.withLock { $0.listener.stopForAuthFailure(generation: generation) }
        noteAuthenticationFailure(error.with(documentID: documentID), token: token)
    }

    /// The server no longer has the document or layer (deleted): listening stops and
    /// `didFailSync` with `.invalidDocument` is reported once, as for a long-poll's 404.
    func streamLayerIsMissing(_ error: LayerSyncError, generation: Int) {
        let stopped = mutableState.withLock { $0.listener.stopForMissingLayer(generation: generation) }
        if stopped { emit(.didFailSync(self, error.with(documentID: documentID))) }
    }

    /// Whether the server answers 404 for this layer (`GET records?since=0&limit=1`), telling a
    /// missing layer from an unknown stream when a subscription got a 404.
    func isMissingOnServer(token: String, session: HTTPSession, cancellation: TransferCancellation) -> Bool {
        do throws(LayerSyncError) {
            _ = try context.server.records(documentID: documentID, layer: layerName, since: 0, limit: 1, jwt: token,
                                           session: session, cancellation: cancellation)
            return false
        } catch {
            return error.code == .invalidDocument && error.httpStatus == 404
        }
    }
}
