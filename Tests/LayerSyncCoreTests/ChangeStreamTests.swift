import Testing
@testable import LayerSyncModel
@testable import LayerSyncTransport

/// The wire side of the change stream (protocol version 2) without a server: Server-Sent
/// Events split at any byte, the events' decoding, and the info's advertisement.
/// The stream against the real server: bindings/python/tests/test_change_stream.py.
struct ChangeStreamTests {
    private func events(_ text: String, chunk: Int) -> [(String, String)] {
        var parser = ServerSentEventParser()
        var out: [(String, String)] = []
        let bytes = Array(text.utf8)
        var index = 0
        while index < bytes.count {
            let end = min(bytes.count, index + chunk)
            let piece = Array(bytes[index..<end])
            let ok = piece.withUnsafeBytes { buffer in
                parser.feed(buffer) { name, data in
                    out.append((name, String(decoding: data, as: UTF8.self)))
                    return true
                }
            }
            #expect(ok)
            index = end
        }
        return out
    }

    @Test(arguments: [1, 2, 7, 4096])
    func eventsAreSplitAtAnyByteAndHeartbeatsAreSkipped(chunk: Int) {
        let text = "event: hello\ndata: {\"stream_id\":\"s\"}\n\n: hb\n\n"
            + "event: changes\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n"
            + "data:no space\rdata: two\r\r"
            + "event: notice\ndata: {}\n"  // not finished: no empty line yet
        let seen = events(text, chunk: chunk)
        #expect(seen.map(\.0) == ["hello", "changes", "message"])
        #expect(seen.map(\.1) == ["{\"stream_id\":\"s\"}", "{\"a\":\n1}", "no space\ntwo"])
    }

    @Test func anEventPastTheLimitEndsTheStream() {
        var parser = ServerSentEventParser()
        let line = [UInt8](repeating: UInt8(ascii: "x"), count: ServerSentEventParser.maximumEventBytes + 1)
        let ok = line.withUnsafeBytes { parser.feed($0) { _, _ in true } }
        #expect(!ok)
    }

    @Test func messagesAreDecodedAndCheckedBeforeUse() throws {
        let changes = try StreamMessage(name: "changes", data: Array(#"{"document_id":"d","layer":"","since":3,"records":[],"revision":3,"epoch":"e","has_more":false,"next_since":3}"#.utf8))
        guard case .changes(let layer, let since, let page) = changes else { Issue.record("not changes: \(changes)"); return }
        #expect(layer == StreamLayer(documentID: "d", layer: "") && since == 3)
        let decoded = try LayerPage(json: page, since: 3, epoch: "e")
        #expect(decoded.revision == 3 && decoded.records.isEmpty)
        // A page whose revision is below the cursor it claims to follow is refused like a long-poll's.
        let bad = try StreamMessage(name: "changes", data: Array(#"{"document_id":"d","layer":"l","since":5,"records":[],"revision":4,"epoch":"e","has_more":false,"next_since":4}"#.utf8))
        if case .changes(_, let since, let page) = bad {
            #expect(throws: LayerSyncError.self) { _ = try LayerPage(json: page, since: since, epoch: "e") }
        }
        let gone = try StreamMessage(name: "unsubscribed", data: Array(#"{"document_id":"d","layer":null,"reason":"token_expired"}"#.utf8))
        guard case .unsubscribed(let goneLayer, let reason) = gone else { Issue.record("not unsubscribed"); return }
        #expect(goneLayer.layer == "" && reason == "token_expired")
        #expect(throws: LayerSyncError.self) { _ = try StreamMessage(name: "notice", data: Array(#"{"document_id":"d","layer":"l"}"#.utf8)) }
        #expect(throws: LayerSyncError.self) { _ = try StreamMessage(name: "hello", data: Array("not json".utf8)) }
        if case .other(let name) = try StreamMessage(name: "future", data: Array("anything".utf8)) {
            #expect(name == "future")
        } else {
            Issue.record("an unknown event is not ignored")
        }
    }

    /// The hello's `stream_key` is the stream's authority, sent back in the `LayerSync-Stream-Key`
    /// header: kept as given, absent from a server that hands out none, refused when it could not
    /// travel in a header.
    @Test func theHelloCarriesTheStreamKey() throws {
        let hello = try StreamMessage(name: "hello", data: Array(#"{"stream_id":"s1","stream_key":"k-_9AZ","heartbeat_s":15,"protocol_version":2}"#.utf8))
        guard case .hello(let streamID, let key) = hello else { Issue.record("not hello: \(hello)"); return }
        #expect(streamID == "s1" && key == "k-_9AZ")
        guard case .hello(_, let none) = try StreamMessage(name: "hello", data: Array(#"{"stream_id":"s1"}"#.utf8)) else {
            Issue.record("not hello"); return
        }
        #expect(none == nil)
        // (as JSON: empty, a line break with a header after it, a space, a non-ASCII letter)
        for bad in ["\"\"", #""a\r\nX-Injected: 1""#, #""a b""#, #""\u00e9""#] {
            #expect(throws: LayerSyncError.self) {
                _ = try StreamMessage(name: "hello", data: Array(("{\"stream_id\":\"s1\",\"stream_key\":" + bad + "}").utf8))
            }
        }
    }

    @Test func subscriptionAnswersAreCheckedByThePagesRule() throws {
        let acked = try SubscriptionAnswer(body: Array(#"{"subscribed":true,"revision":7,"epoch":"e","ack":true}"#.utf8), since: 5, epoch: "e")
        #expect(acked.acknowledged && !acked.reset && acked.revision == 7 && acked.cursorAhead == nil)
        // A revision below the since subscribed from (same epoch): the client's cursor is ahead of the server.
        let behind = try SubscriptionAnswer(body: Array(#"{"subscribed":true,"revision":1,"epoch":"e"}"#.utf8), since: 4, epoch: "e")
        #expect(behind.cursorAhead?.code == .invalidServerData && !behind.acknowledged)
        // Another epoch (or none held) starts its revisions again; a reset is not compared.
        #expect(try SubscriptionAnswer(body: Array(#"{"subscribed":true,"revision":1,"epoch":"f"}"#.utf8), since: 4, epoch: "e").cursorAhead == nil)
        #expect(try SubscriptionAnswer(body: Array(#"{"subscribed":true,"revision":1,"epoch":"e"}"#.utf8), since: 4, epoch: nil).cursorAhead == nil)
        #expect(try SubscriptionAnswer(body: Array(#"{"subscribed":true,"revision":1,"epoch":"f","reset":true}"#.utf8), since: 4, epoch: "e").reset)
        #expect(throws: LayerSyncError.self) { _ = try SubscriptionAnswer(body: Array(#"{"subscribed":false,"revision":1,"epoch":"e"}"#.utf8), since: 0, epoch: nil) }
        #expect(throws: LayerSyncError.self) { _ = try SubscriptionAnswer(body: Array(#"{"subscribed":true,"epoch":"e"}"#.utf8), since: 0, epoch: nil) }
        let ack = try StreamMessage(name: "subscribed", data: Array(#"{"document_id":"d","layer":"l","revision":7}"#.utf8))
        guard case .subscribed(let layer) = ack else { Issue.record("not subscribed: \(ack)"); return }
        #expect(layer == StreamLayer(documentID: "d", layer: "l"))
        #expect(throws: LayerSyncError.self) { _ = try StreamMessage(name: "subscribed", data: Array(#"{"layer":"l"}"#.utf8)) }
    }

    @Test func theInfoAdvertisesTheStreamOnlyFromProtocolTwo() throws {
        let v2 = try ServerInfo(body: Array(#"{"protocol":{"min":1,"max":2},"capabilities":["long-poll","stream"],"stream":{"path":"/sync/v2/stream","heartbeat_s":0.5}}"#.utf8))
        #expect(v2.streamPath == "/sync/v2/stream" && v2.streamHeartbeatSeconds == 0.5)
        let v1 = try ServerInfo(body: Array(#"{"protocol":{"min":1,"max":1},"capabilities":["long-poll","stream"],"stream":{"path":"/sync/v2/stream"}}"#.utf8))
        #expect(v1.streamPath == nil)
        let none = try ServerInfo(body: Array(#"{"protocol":{"min":1,"max":2},"capabilities":["long-poll"]}"#.utf8))
        #expect(none.streamPath == nil)
        #expect(throws: LayerSyncError.self) {
            _ = try ServerInfo(body: Array(#"{"protocol":{"min":1,"max":2},"stream":{"path":"http://elsewhere/x"}}"#.utf8))
        }
    }
}
