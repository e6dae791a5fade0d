import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

#if canImport(Glibc)
import Glibc
#endif

/// Bad input found by breaking the engine: each case used to be accepted locally and then
/// broke the layer for others (deep nesting), blocked the queue (huge numbers), diverged
/// silently (1e999, NUL in ids) or handed out another user's layer.
@Suite struct RecordLimitsTests {
    /// `objects` objects nested in each other around a number.
    func nested(_ objects: Int) -> String {
        String(repeating: #"{"a":"#, count: objects) + "1" + String(repeating: "}", count: objects)
    }

    @Test func nestingUpToTheLimitIsAcceptedAndDeeperIsRejected() throws {
        // The record itself is level 1 and customData's object level 2, so 63 nested objects
        // reach level 64, the limit, and 64 go one deeper.
        let ok = #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment","customData":"# + nested(RecordLimits.maximumDepth - 1) + "}"
        _ = try DocumentDescriptor.recordObject(ok)
        let deep = #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment","customData":"# + nested(RecordLimits.maximumDepth) + "}"
        let error = #expect(throws: LayerSyncError.self) { try DocumentDescriptor.recordObject(deep) }
        #expect(error?.code == .invalidJSONStructure)
    }

    @Test(arguments: ["1" + String(repeating: "0", count: 5000), "1e999", "-1e999", "1" + String(repeating: "0", count: 100)])
    func numbersThatDoNotSurviveOtherParsersAreRejected(_ number: String) {
        let error = #expect(throws: LayerSyncError.self) {
            try DocumentDescriptor.recordObject(#"{"type":"pspdfkit/note","pageIndex":0,"text":{"format":"plain","value":""},"icon":"comment","bbox":[0,0,1,"# + number + "]}")
        }
        #expect(error?.code == .invalidJSONStructure)
    }

    @Test func ordinaryNumbersPass() throws {
        _ = try DocumentDescriptor.recordObject(#"{"type":"pspdfkit/ink","pageIndex":0,"lines":{"points":[[[1,2]]]},"lineWidth":1,"bbox":[0.5,-12,1e3,170.08000000000001],"opacity":1}"#)
    }

    @Test(arguments: ["dup\u{0}one", "a\u{1}b", "tab\tid", "del\u{7F}", "", String(repeating: "x", count: 129)])
    func idsWithControlCharactersOrBadLengthAreRejected(_ id: String) {
        let error = #expect(throws: LayerSyncError.self) { try DocumentDescriptor.recordID(.string(id)) }
        #expect(error?.code == .invalidJSONStructure)
    }

    @Test func idsWithAnyOtherTextPass() throws {
        #expect(try DocumentDescriptor.recordID(.string("01JYS36MGS2A3E1H83BK1ZRQVX")) == "01JYS36MGS2A3E1H83BK1ZRQVX")
        #expect(try DocumentDescriptor.recordID(.string("مرحبا 👋🏽")) == "مرحبا 👋🏽")
    }

    @Test func theReservedLayerNameAndControlCharactersInClaimsAreInvalidJWTs() {
        for payload in [#"{"document_id":"d","layer":"~"}"#, #"{"document_id":"d\u0000x"}"#, #"{"document_id":"d","layer":"a\nb"}"#] {
            let error = #expect(throws: LayerSyncError.self) { try JWTClaims(token: makeJWT(payload)) }
            #expect(error?.code == .invalidJWT)
        }
    }

    @Test func anotherUsersJWTDoesNotGetThePinnedLayer() throws {
        var template = Array("/tmp/layersync-limits-XXXXXX".utf8CString)
        let storage = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        defer { _ = try? removeTree(storage) }
        let client = try SyncClient(configuration: ClientConfiguration(serverURL: "http://127.0.0.1:1", storagePath: storage)) { _ in }
        defer { try? client.shutdown() }
        let alice = try client.document(forJWT: makeJWT(#"{"document_id":"d","user_id":"alice"}"#))
        #expect(try client.document(forJWT: makeJWT(#"{"document_id":"d","user_id":"alice"}"#)) === alice)
        let error = #expect(throws: LayerSyncError.self) {
            try client.document(forJWT: makeJWT(#"{"document_id":"d","user_id":"mallory"}"#))
        }
        #expect(error?.code == .userIDMismatch)
    }
}

/// Removes a directory tree (test cleanup).
private func removeTree(_ path: String) throws {
    _ = path.withCString { system("rm -rf '\(String(cString: $0))'") }
}
