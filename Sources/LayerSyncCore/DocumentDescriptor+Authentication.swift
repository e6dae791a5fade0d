import LayerSyncModel
import LayerSyncTransport

/// Replacing the JWT (Instant's `reauthenticate(withJWT:)`).
extension DocumentDescriptor {
    /// Replaces the token after checking it offline and then against the server.
    ///
    /// The verification (an authenticated `GET .../records?since=0&limit=1`) runs in the
    /// background and ends with `didFinishReauthentication` (the token is adopted, a pending
    /// sync and a listening loop stopped by an auth failure resume) or
    /// `didFailReauthentication` (`.accessDenied` if the server rejects it,
    /// `.requestFailed` if it could not be asked; the old token stays). When the new token's
    /// `collaboration_permissions` or `user_id` differ, the records it may now view appear and
    /// those it may no longer view disappear before `didFinishReauthentication`
    /// (``reconcileGrant(token:cancellation:)``).
    /// - Parameter jwt: The new token.
    /// - Throws: `.invalidJWT` (shape, or another document/layer), `.userIDMismatch` (user
    ///   differs from the pinned one), `.alreadyAuthenticating`, `.invalidState` after shutdown.
    public func reauthenticate(jwt: String) throws(LayerSyncError) {
        let claims = try JWTClaims(token: jwt)
        guard claims.documentID == documentID, claims.layerName == layerName else {
            throw LayerSyncError(.invalidJWT, "the JWT is for document '\(claims.documentID)' layer '\(claims.layerName)', not this one",
                                 documentID: documentID)
        }
        if let pinned = try store.meta("user_id"), let user = claims.userID, user != pinned {
            throw LayerSyncError(.userIDMismatch, "the JWT's user_id '\(user)' differs from the pinned '\(pinned)'", documentID: documentID)
        }
        guard !context.isShutDown else { throw LayerSyncError(.invalidState, "the client is shut down") }
        let started = mutableState.withLock { $0.authentication.beginReauthentication() }
        if !started { throw LayerSyncError(.alreadyAuthenticating, "a reauthentication is already running", documentID: documentID) }
        workQueue.async { [self] in verify(claims) }
    }

    private func verify(_ claims: JWTClaims) {
        // Registered so that shutdown (cancelAllWork) aborts a hanging verification at once.
        let cancellation = TransferCancellation()
        mutableState.withLock { $0.operation = cancellation }
        defer { mutableState.withLock { $0.operation = nil } }
        do throws(LayerSyncError) {
            guard !context.isShutDown else { throw LayerSyncError(.cancelled, "the client is shut down") }
            _ = try context.server.records(documentID: documentID, layer: layerName, since: 0, limit: 1, jwt: claims.token,
                                           session: workSession, cancellation: cancellation)
        } catch {
            mutableState.withLock { $0.authentication.failReauthentication() }
            emit(.didFailReauthentication(self, error.with(documentID: documentID)))
            return
        }
        if let user = claims.userID, (try? store.meta("user_id")) == nil { try? store.setMeta("user_id", user) }
        let resumeListening = mutableState.withLock { state -> Bool in
            state.authentication.finishReauthentication(with: claims)
            return state.listener.stoppedByAuth
        }
        // Other collaboration permissions (or user): records appear and disappear before the host
        // hears of the new token; a failure here is retried by the next sync cycle.
        try? reconcileGrant(token: claims.token, cancellation: cancellation)
        emit(.didFinishReauthentication(self, jwt: claims.token))
        if resumeListening {
            beginListening()
        } else if isListening {
            context.stream.resubscribe(self)  // the subscription goes on under the new token
        }
        if hasUnsyncedChanges && isDownloaded && syncDelay >= 0 { requestSyncCycle() }
    }
}
