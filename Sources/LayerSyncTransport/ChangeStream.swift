import Dispatch
import LayerSyncModel
import Synchronization

/// The change stream of protocol version 2 as the client sees it (protocol.md "Protocol
/// version 2: the change stream"): a `POST /sync/v2/stream` answered with Server-Sent Events
/// for every layer the client listens on, whatever users their JWTs name, and the short
/// requests that add and remove its subscriptions (each with its layer's JWT and the stream's
/// key, the authority over the stream). What an event means for a layer
/// is decided by LayerSyncCore (`StreamListener`); this file only speaks the wire.

/// One message of the change stream.
package enum StreamMessage: Sendable {
    /// The first event: the stream's id and key (`stream_key`: sent on every subscribe and
    /// unsubscribe, and to replace the stream; `nil` from a server that hands out none).
    case hello(streamID: String, key: String?)
    /// A page of a layer following `since` (the page itself: ``LayerPage/init(json:since:epoch:)``).
    case changes(StreamLayer, since: Int64, page: JSONValue)
    /// Changes up to `revision` that the stream did not carry: fetch them with `GET records`.
    case notice(StreamLayer, revision: Int64)
    /// The server confirms on the stream a subscription it answered with `"ack": true`: the
    /// stream delivers what the server sends (``SubscriptionAnswer/acknowledged``).
    case subscribed(StreamLayer)
    /// The server ended one subscription (`token_expired`, `token_revoked`, `not_found`, `forbidden`).
    case unsubscribed(StreamLayer, reason: String)
    /// The layer's epoch differs from the one subscribed with: re-download it.
    case reset(StreamLayer, epoch: String)
    /// The server is stopping; the stream ends.
    case bye(reason: String)
    /// An event this client does not know (ignored, for later protocol additions).
    case other(name: String)
}

/// The (document, layer) an event is about.
package struct StreamLayer: Hashable, Sendable {
    package var documentID: String
    package var layer: String
    package init(documentID: String, layer: String) {
        self.documentID = documentID
        self.layer = layer
    }
}

/// How a stream ended without an error.
package enum StreamEnd: Sendable, Equatable {
    /// The answer ended (after `bye`, or the server closed it): reconnect.
    case closed
    /// The consumer asked to end it (its handler or its watchdog returned `false`/`true`).
    case stopped
    /// A 2xx answer that ended before its `hello`: something between client and server
    /// buffered it whole (protocol.md: the client then falls back to long-polls).
    case noHello
}

/// Splits Server-Sent Events (https://html.spec.whatwg.org/multipage/server-sent-events.html)
/// out of the bytes of a stream: `event:` and `data:` fields, an empty line ends an event,
/// lines starting with `:` are comments (the heartbeats). Lines end with LF, CRLF or CR.
struct ServerSentEventParser {
    /// The largest event accepted (a server sends a `notice` for anything bigger than its
    /// page limit, so this only bounds memory against a broken peer).
    static let maximumEventBytes = 64 << 20

    private var line: [UInt8] = []
    private var eventName = ""
    private var data: [UInt8] = []
    private var hasData = false
    private var eventBytes = 0
    private var afterCR = false

    /// Feeds bytes and calls `emit(name, data)` for each complete event.
    /// - Returns: `false` when an event passed ``maximumEventBytes`` (end the stream).
    mutating func feed(_ bytes: UnsafeRawBufferPointer, _ emit: (String, [UInt8]) -> Bool) -> Bool {
        for byte in bytes {
            if afterCR {
                afterCR = false
                if byte == 0x0A { continue }  // CRLF: the line already ended at CR
            }
            if byte == 0x0A || byte == 0x0D {
                afterCR = byte == 0x0D
                guard endLine(emit) else { return false }
                continue
            }
            line.append(byte)
            eventBytes += 1
            if eventBytes > Self.maximumEventBytes { return false }
        }
        return true
    }

    private mutating func endLine(_ emit: (String, [UInt8]) -> Bool) -> Bool {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty {
            defer {
                eventName = ""
                data.removeAll(keepingCapacity: false)
                hasData = false
                eventBytes = 0
            }
            guard hasData else { return true }
            return emit(eventName.isEmpty ? "message" : eventName, data)
        }
        if line.first == UInt8(ascii: ":") { return true }  // comment: heartbeat
        let colon = line.firstIndex(of: UInt8(ascii: ":")) ?? line.count
        let field = String(decoding: line[..<colon], as: UTF8.self)
        var value = colon < line.count ? line[(colon + 1)...] : []
        if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
        switch field {
        case "event": eventName = String(decoding: value, as: UTF8.self)
        case "data":
            if hasData { data.append(0x0A) }
            data.append(contentsOf: value)
            hasData = true
        default: break  // id, retry: not used by this protocol
        }
        return true
    }
}

extension StreamMessage {
    /// Decodes one event.
    /// - Throws: `.invalidServerData` for data that is not the JSON object the event needs.
    init(name: String, data: [UInt8]) throws(LayerSyncError) {
        guard let json = try? JSONValue.parse(bytes: data), case .object = json else {
            if !["hello", "changes", "notice", "subscribed", "unsubscribed", "reset", "bye"].contains(name) {
                self = .other(name: name)
                return
            }
            throw LayerSyncError(.invalidServerData, "change stream: the data of a \(name) event is not a JSON object")
        }
        func string(_ key: String) throws(LayerSyncError) -> String {
            guard let value = json[key]?.stringValue else {
                throw LayerSyncError(.invalidServerData, "change stream: the \(name) event has no string \"\(key)\"")
            }
            return value
        }
        func integer(_ key: String) throws(LayerSyncError) -> Int64 {
            guard let value = json[key]?.int64Value, value >= 0 else {
                throw LayerSyncError(.invalidServerData, "change stream: the \(name) event has no revision \"\(key)\"")
            }
            return value
        }
        func layer() throws(LayerSyncError) -> StreamLayer {
            // The default layer may come as "" or null.
            let layer = json["layer"].flatMap { $0.isNull ? "" : $0.stringValue }
            guard let layer else { throw LayerSyncError(.invalidServerData, "change stream: the \(name) event has no \"layer\"") }
            return StreamLayer(documentID: try string("document_id"), layer: layer)
        }
        switch name {
        case "hello":
            // The key travels back in a header: visible ASCII only (no line break can end up in a request).
            let key = json["stream_key"]?.stringValue
            if let key, key.isEmpty || !key.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) }) {
                throw LayerSyncError(.invalidServerData, "change stream: the hello's \"stream_key\" is not a token of visible ASCII characters")
            }
            self = .hello(streamID: try string("stream_id"), key: key)
        case "changes": self = .changes(try layer(), since: try integer("since"), page: json)
        case "notice": self = .notice(try layer(), revision: try integer("revision"))
        case "subscribed": self = .subscribed(try layer())
        case "unsubscribed": self = .unsubscribed(try layer(), reason: try string("reason"))
        case "reset": self = .reset(try layer(), epoch: try string("epoch"))
        case "bye": self = .bye(reason: json["reason"]?.stringValue ?? "")
        default: self = .other(name: name)
        }
    }
}

extension SyncServer {
    /// `POST /sync/v2/stream`: opens a change stream on `group` (its driving thread) and reads
    /// it until it ends, calling `onMessage` on that thread for each event (heartbeats only
    /// keep it alive), then `completion` with how it ended. Returns at once.
    ///
    /// A peer that sends nothing for `stallSeconds` (two heartbeat periods) counts as dead
    /// (`.requestFailed`). Whether events arrive when they should (buffering) is the caller's
    /// watchdog's to judge.
    /// - Parameters:
    ///   - path: The stream's path (``ServerInfo/streamPath``).
    ///   - jwt: Any JWT valid on this server (it authorises holding a stream, nothing else:
    ///     subscriptions are authorised by their own layers' JWTs, of any user).
    ///   - replaces: The id and key of this client's previous stream, given up as dead (silent,
    ///     failed, ended): the server closes it if it still holds it (`{"replaces": id, "key":
    ///     key}`; its path may take bytes and deliver none, which the server cannot see), `nil`
    ///     for none.
    ///   - stallSeconds: Seconds of silence that end the stream.
    ///   - group: Where the transfer runs (the calling thread drives it).
    ///   - watchdog: Called about once a second on the driving thread with whether the request
    ///     has been sent and how many body bytes arrived so far; `true` ends the stream (``StreamEnd/stopped``).
    ///   - onMessage: Returns `false` to end the stream (``StreamEnd/stopped``).
    ///   - completion: How the stream ended, or its error: `.accessDenied` (401/403),
    ///     `.invalidDocument` (404: no stream here), `.invalidServerData` (an event that is not
    ///     what the protocol says), `.requestFailed`, `.cancelled`.
    package func startStream(path: String, jwt: String, replaces: (id: String, key: String?)?, stallSeconds: Int,
                             group: HTTPTransferGroup,
                             cancellation: TransferCancellation,
                             watchdog: @escaping @Sendable (_ requestSent: Bool, _ bodyBytes: Int) -> Bool,
                             onMessage: @escaping @Sendable (StreamMessage) -> Bool,
                             completion: @escaping @Sendable (Result<StreamEnd, LayerSyncError>) -> Void) {
        struct Reading {
            var parser = ServerSentEventParser()
            var sawHello = false
            var bodyBytes = 0
            var stopped = false
            var invalid: LayerSyncError?
        }
        let reading = Mutex(Reading())  // used on the driving thread only; the lock makes the closures Sendable
        var request = HTTPRequest(method: "POST", url: url.url(path))
        request.headers = ["Content-Type: application/json", "Cache-Control: no-cache"]
        var body = JSONObject()
        if let replaces {
            body["replaces"] = .string(replaces.id)
            if let key = replaces.key { body["key"] = .string(key) }
        }
        request.body = JSONValue.object(body).jsonBytes
        request.timeoutSeconds = 0
        request.stallSeconds = stallSeconds
        request.onBodyChunk = { bytes in
            reading.withLock { state in
                state.bodyBytes += bytes.count
                var parser = state.parser
                defer { state.parser = parser }
                let complete = parser.feed(bytes) { name, data in
                    let message: StreamMessage
                    do throws(LayerSyncError) {
                        message = try StreamMessage(name: name, data: data)
                    } catch {
                        state.invalid = error
                        return false
                    }
                    if case .hello = message {
                        state.sawHello = true
                    } else if !state.sawHello {
                        state.invalid = LayerSyncError(.invalidServerData, "change stream: the first event is \(name), not hello")
                        return false
                    }
                    guard onMessage(message) else {
                        state.stopped = true
                        return false
                    }
                    return true
                }
                if !complete, state.invalid == nil, !state.stopped {
                    state.invalid = LayerSyncError(.invalidServerData, "change stream: an event over \(ServerSentEventParser.maximumEventBytes) bytes")
                }
                return complete
            }
        }
        request.watchdog = { requestSent in
            let bodyBytes = reading.withLock { $0.bodyBytes }
            guard watchdog(requestSent, bodyBytes) else { return false }
            reading.withLock { $0.stopped = true }
            return true
        }
        start(request, jwt: jwt, group: group, cancellation: cancellation, accept: "text/event-stream", protocolVersion: 2) { result in
            let state = reading.withLock { $0 }
            switch result {
            case .failure(let error) where error.code == .requestFailed && error.httpStatus == nil:
                if let invalid = state.invalid { completion(.failure(invalid)) } else if state.stopped { completion(.success(.stopped)) } else {
                    completion(.failure(error))
                }
            case .failure(let error): completion(.failure(error))
            case .success:
                if let invalid = state.invalid { completion(.failure(invalid)) } else {
                    // A 2xx answer that ended before its hello was buffered whole by something in between.
                    completion(.success(state.sawHello ? .closed : .noHello))
                }
            }
        }
    }

    /// `POST /sync/v2/stream/{id}/subscriptions`: subscribes the stream to a layer from `since`.
    /// - Parameters:
    ///   - path: The stream's path.
    ///   - streamID: The id from the stream's `hello`.
    ///   - key: The key from the stream's `hello` (``streamKeyHeader``), `nil` when it had none.
    ///   - epoch: The epoch the client holds, `nil` for none.
    ///   - jwt: The layer's JWT (of any user).
    /// - Returns: The answer (``SubscriptionAnswer``: the server is asked to acknowledge the
    ///   subscription on the stream, `"ack": true`).
    /// - Throws: `.accessDenied` (401/403), `.invalidDocument` (404: unknown stream, a wrong key, or a missing layer),
    ///   `.invalidServerData` (not a subscription answer), the other mapped errors (429: the
    ///   stream holds the server's maximum of subscriptions).
    package func subscribe(path: String, streamID: String, key: String?, documentID: String, layer: String, since: Int64, epoch: String?,
                           jwt: String, session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) -> SubscriptionAnswer {
        var request = HTTPRequest(method: "POST", url: url.url(path + "/\(ServerURL.encodeSegment(streamID))/subscriptions"))
        var body = JSONObject()
        body["document_id"] = .string(documentID)
        body["layer"] = .string(layer)
        body["since"] = .integer(since)
        body["epoch"] = epoch.map { .string($0) } ?? .null
        body["ack"] = .bool(true)
        request.headers = ["Content-Type: application/json"] + Self.streamKeyHeaders(key)
        request.body = JSONValue.object(body).jsonBytes
        let response = try send(request, jwt: jwt, session: session, cancellation: cancellation, accept: "application/json", protocolVersion: 2)
        return try SubscriptionAnswer(body: response.body, since: since, epoch: epoch)
    }

    /// `DELETE /sync/v2/stream/{id}/subscriptions?document_id=&layer=`: ends a subscription.
    /// - Parameters:
    ///   - key: The stream's key, as for ``subscribe(path:streamID:key:documentID:layer:since:epoch:jwt:session:cancellation:)``.
    ///   - jwt: A JWT for the document (any layer, any user; the server takes an expired one here).
    /// - Throws: `.invalidDocument` (404: none, or a wrong key), the other mapped errors.
    package func unsubscribe(path: String, streamID: String, key: String?, documentID: String, layer: String, jwt: String,
                             session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) {
        let query = "document_id=\(ServerURL.encodeSegment(documentID))&layer=\(ServerURL.encodeSegment(layer))"
        var request = HTTPRequest(method: "DELETE", url: url.url(path + "/\(ServerURL.encodeSegment(streamID))/subscriptions?" + query))
        request.headers = Self.streamKeyHeaders(key)
        _ = try send(request, jwt: jwt, session: session, cancellation: cancellation, accept: "application/json", protocolVersion: 2)
    }

    /// The request header that carries a stream's key (a header, not the URL: proxies' access
    /// logs record URLs).
    package static let streamKeyHeader = "LayerSync-Stream-Key"

    /// The header lines naming a stream's `key` (none for `nil`).
    private static func streamKeyHeaders(_ key: String?) -> [String] {
        key.map { ["\(streamKeyHeader): \($0)"] } ?? []
    }
}
