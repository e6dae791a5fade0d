/// The claims of a LayerSync JWT, from the offline shape check (docs/architecture.md §3).
///
/// The client never verifies signatures (it has no key); it only checks that the token
/// is three dot-separated base64url parts whose header and payload are JSON objects,
/// that `document_id` is a non-empty string, and that optional claims are well-typed.
/// The server verifies signature and expiry.
package struct JWTClaims: Sendable, Equatable {
    /// The token text as given.
    package var token: String
    /// `document_id`.
    package var documentID: String
    /// `layer` (alias `layer_name`); `""` is the default layer.
    package var layerName: String
    /// `user_id`, if present.
    package var userID: String?
    /// `permissions`, if present.
    var permissions: [String]?
    /// `exp` in seconds since the Unix epoch, if present.
    var expiresAt: Double?
    /// `creator_name`, if present: forced as `creatorName` of the annotations and comments
    /// the token creates.
    package var creatorName: String?
    /// `default_group`, if present: the group of the records the token creates.
    package var defaultGroup: String?
    /// `collaboration_permissions` parsed, `nil` when absent (full access).
    package var collaboration: CollaborationPermissions?

    /// The longest token accepted, in bytes (UTF-8). It travels in every request's
    /// `Authorization` header: libcurl refuses a request of more than 1 MiB ("Out of memory"),
    /// common proxies much less, and the server answers 431 above the same limit; a longer
    /// token is refused here rather than failing every request as if offline.
    package static let maximumTokenBytes = 65_536

    /// What this token may do with records (``PermissionGrant``).
    package var grant: PermissionGrant {
        PermissionGrant(collaboration: collaboration, userID: userID, canWrite: permissions?.contains("write") ?? true,
                        defaultGroup: defaultGroup)
    }

    /// Shape-checks and decodes a JWT.
    /// - Parameter token: The compact JWS text.
    /// - Throws: `.invalidJWT` describing the first problem found.
    package init(token: String) throws(LayerSyncError) {
        func invalid(_ why: String) -> LayerSyncError { LayerSyncError(.invalidJWT, "malformed JWT: \(why)") }
        guard token.utf8.count <= Self.maximumTokenBytes else {
            throw LayerSyncError(.invalidJWT, "JWT too long: \(token.utf8.count) bytes, the limit is \(Self.maximumTokenBytes) "
                                 + "(it is sent in every request's Authorization header)")
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw invalid("expected 3 dot-separated parts, found \(parts.count)") }
        guard !parts[0].isEmpty, !parts[1].isEmpty else { throw invalid("empty header or payload") }
        guard Base64URL.decode(parts[2]) != nil else { throw invalid("signature is not base64url") }
        guard let headerBytes = Base64URL.decode(parts[0]),
              case .object(let header)? = try? JSONValue.parse(bytes: headerBytes) else {
            throw invalid("header is not base64url JSON object")
        }
        if let alg = header["alg"], alg.stringValue == nil { throw invalid("alg is not a string") }
        guard let payloadBytes = Base64URL.decode(parts[1]) else { throw invalid("payload is not base64url JSON object") }
        let payloadValue: JSONValue
        do {
            payloadValue = try JSONValue.parse(bytes: payloadBytes)
        } catch {
            // The parser's reason, e.g. a lone surrogate escape, which no string can hold (the
            // server refuses a token with one in any claim too: 403, protocol.md "Authentication").
            throw invalid("payload is not base64url JSON object (\(error.message))")
        }
        guard case .object(let payload) = payloadValue else { throw invalid("payload is not base64url JSON object") }
        guard let documentID = payload["document_id"]?.stringValue, !documentID.isEmpty else {
            throw invalid("document_id missing or not a non-empty string")
        }
        func optionalString(_ key: String) throws(LayerSyncError) -> String? {
            guard let value = payload[key], !value.isNull else { return nil }
            guard let string = value.stringValue else { throw invalid("\(key) is not a string") }
            return string
        }
        let layer = try optionalString("layer")
        let layerAlias = try optionalString("layer_name")
        if let layer, let layerAlias, layer != layerAlias { throw invalid("layer and layer_name differ") }
        let userID = try optionalString("user_id")
        let creatorName = try optionalString("creator_name")
        let defaultGroup = try optionalString("default_group")
        var permissions: [String]?
        if let value = payload["permissions"], !value.isNull {
            guard let array = value.arrayValue else { throw invalid("permissions is not an array") }
            var strings: [String] = []
            for element in array {
                guard let string = element.stringValue else { throw invalid("permissions has a non-string") }
                strings.append(string)
            }
            permissions = strings
        }
        var expiresAt: Double?
        if let value = payload["exp"], !value.isNull {
            guard let number = value.doubleValue else { throw invalid("exp is not a number") }
            expiresAt = number
        }
        // A malformed entry makes the token invalid, as on the server (the entry named).
        let collaboration = try CollaborationPermissions.parse(claim: payload["collaboration_permissions"])
        let layerName = layer ?? layerAlias ?? ""
        // docs/protocol.md: `~` spells the default layer in URLs, and ids carry no control characters.
        if layerName == "~" { throw invalid("layer \"~\" is reserved (it names the default layer in URLs)") }
        for (claim, value) in [("document_id", documentID), ("layer", layerName)]
        where value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw invalid("\(claim) contains a control character")
        }
        self.token = token
        self.documentID = documentID
        self.layerName = layerName
        self.userID = userID
        self.permissions = permissions
        self.expiresAt = expiresAt
        self.creatorName = creatorName
        self.defaultGroup = defaultGroup
        self.collaboration = collaboration
    }
}
