import LayerSyncModel

/// The token of one descriptor (``DocumentDescriptor/reauthenticate(jwt:)``), kept under the
/// descriptor's lock: the claims in use, whether the server rejected them, and whether a new
/// token is being verified.
///
/// An auth failure (401/403) is reported once per token, and only for the token in use: a
/// request that began with an older token says nothing about the new one. So the rejected
/// token is always `nil` or the token in use. Until a reauthentication succeeds, no automatic
/// sync is scheduled and a sync cycle fails at once with `.accessDenied`. At most one
/// reauthentication runs at a time, and the token in use changes only once the server has
/// accepted the new one (a rejected or unverifiable token leaves everything as it was).
struct Authentication: Sendable {
    /// The claims of the token in use.
    private(set) var claims: JWTClaims
    /// Whether a new token is being verified against the server.
    private(set) var isReauthenticating = false
    /// The token in use once the server rejected it (its failure was reported), else `nil`.
    private var rejectedToken: String?

    /// - Parameter claims: The claims of the token the descriptor was opened with.
    init(claims: JWTClaims) { self.claims = claims }

    /// The token in use.
    var token: String { claims.token }

    /// Whether the server rejected the token in use (reported, and not replaced since).
    var isTokenRejected: Bool { rejectedToken != nil }

    /// Records that the server rejected `token`.
    /// - Returns: Whether this is the first rejection of the token in use, so the caller
    ///   reports it; `false` when it was reported already or `token` is no longer in use.
    mutating func noteRejection(of token: String) -> Bool {
        guard rejectedToken != token, claims.token == token else { return false }
        rejectedToken = token
        return true
    }

    /// Starts verifying a new token unless a verification runs already.
    /// - Returns: Whether it started (`false`: `.alreadyAuthenticating`).
    mutating func beginReauthentication() -> Bool {
        guard !isReauthenticating else { return false }
        isReauthenticating = true
        return true
    }

    /// The verification failed: the token in use stays, and so does its rejection.
    mutating func failReauthentication() { isReauthenticating = false }

    /// The server accepted the new token: it is the token in use from now on, not rejected.
    mutating func finishReauthentication(with claims: JWTClaims) {
        self.claims = claims
        rejectedToken = nil
        isReauthenticating = false
    }
}
