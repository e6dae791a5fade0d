import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

/// Builds an unsigned-looking JWT with the given payload JSON.
func makeJWT(_ payload: String, header: String = #"{"alg":"ES256","typ":"JWT"}"#) -> String {
    func encode(_ text: String) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let bytes = Array(text.utf8)
        var output = ""
        var index = 0
        while index < bytes.count {
            let chunk = Array(bytes[index..<min(index + 3, bytes.count)])
            let value = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (16 - 8 * UInt32($1.offset)) }
            for position in 0..<(chunk.count + 1) { output.append(alphabet[Int((value >> (18 - 6 * UInt32(position))) & 63)]) }
            index += 3
        }
        return output
    }
    return encode(header) + "." + encode(payload) + ".c2lnbmF0dXJl"
}

@Suite struct JWTClaimsTests {
    @Test func parsesAWellFormedToken() throws {
        let claims = try JWTClaims(token: makeJWT(#"{"document_id":"doc-1","layer":"review","user_id":"alice","permissions":["write"],"exp":1999999999}"#))
        #expect(claims.documentID == "doc-1")
        #expect(claims.layerName == "review")
        #expect(claims.userID == "alice")
        #expect(claims.permissions == ["write"])
        #expect(claims.expiresAt == 1_999_999_999)
    }

    /// A JWT travels in every request's header (libcurl: 1 MiB per request at most): one over
    /// the limit is refused offline with the limit named, one at it is accepted.
    @Test func refusesATokenOverTheLengthLimit() throws {
        let prefix = makeJWT(#"{"document_id":"d","pad":""}"#).count
        let fits = makeJWT(#"{"document_id":"d","pad":"\#(String(repeating: "x", count: (JWTClaims.maximumTokenBytes - prefix) * 3 / 4 - 2))"}"#)
        #expect(fits.utf8.count <= JWTClaims.maximumTokenBytes)
        _ = try JWTClaims(token: fits)
        let long = makeJWT(#"{"document_id":"d","pad":"\#(String(repeating: "x", count: JWTClaims.maximumTokenBytes))"}"#)
        #expect(throws: LayerSyncError.self) { _ = try JWTClaims(token: long) }
        do throws(LayerSyncError) {
            _ = try JWTClaims(token: long)
        } catch {
            #expect(error.code == .invalidJWT && error.message.contains("\(JWTClaims.maximumTokenBytes)"), "\(error.message)")
        }
    }

    /// A lone surrogate escape cannot be a Swift string: the JWT is invalid, and the message says why.
    @Test func aLoneSurrogateInThePayloadIsNamed() {
        do throws(LayerSyncError) {
            _ = try JWTClaims(token: makeJWT(#"{"document_id":"d","collaboration_permissions":["annotations:view:group=\ud800"]}"#))
            Issue.record("accepted")
        } catch {
            #expect(error.code == .invalidJWT && error.message.contains("lone surrogate"), "\(error.message)")
        }
    }

    @Test func acceptsLayerNameAliasAndDefaultsToTheDefaultLayer() throws {
        #expect(try JWTClaims(token: makeJWT(#"{"document_id":"d","layer_name":"x"}"#)).layerName == "x")
        #expect(try JWTClaims(token: makeJWT(#"{"document_id":"d"}"#)).layerName == "")
    }

    @Test(arguments: [
        "not-a-jwt",
        "a.b",
        "a.b.c.d",
        makeJWT(#"{"layer":"x"}"#),                       // no document_id
        makeJWT(#"{"document_id":42}"#),                  // wrong type
        makeJWT(#"{"document_id":""}"#),                  // empty
        makeJWT(#"{"document_id":"d","layer":7}"#),
        makeJWT(#"{"document_id":"d","user_id":["a"]}"#),
        makeJWT(#"{"document_id":"d","permissions":"write"}"#),
        makeJWT(#"{"document_id":"d","exp":"tomorrow"}"#),
        makeJWT(#"["document_id"]"#),                     // payload not an object
        makeJWT(#"{"document_id":"d"}"#, header: "not json"),
        "eyJhbGciOiJFUzI1NiJ9.%%%%.c2ln",                 // not base64url
    ])
    func rejectsMalformedTokens(_ token: String) {
        #expect(throws: LayerSyncError.self) { try JWTClaims(token: token) }
        do { _ = try JWTClaims(token: token) } catch { #expect(error.code == .invalidJWT) }
    }
}
