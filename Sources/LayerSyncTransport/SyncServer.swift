import LayerSyncModel
import Synchronization

/// The sync server as the client sees it: the endpoints of protocol.md version 1, with
/// their error envelope mapped to ``ErrorCode``s. Every request carries
/// `LayerSync-Protocol: 1`, and all but `info` a `Bearer` JWT.
package final class SyncServer: Sendable {
    /// The protocol version this client speaks.
    static let protocolVersion = 1

    /// The base URL.
    package let url: ServerURL
    private let requestTimeout: Double
    private let availability = Mutex(NetworkAvailability())
    private let transportFailureHandler = Mutex<(@Sendable (UInt64) -> Void)?>(nil)

    /// Creates the endpoint set.
    /// - Parameters:
    ///   - url: The validated base URL.
    ///   - requestTimeout: Seconds per ordinary request.
    package init(url: ServerURL, requestTimeout: Double) {
        self.url = url
        self.requestTimeout = requestTimeout
    }

    /// Whether requests may be attempted: neither the host (``SyncClient/setNetworkAvailable(_:)``)
    /// nor the host's reachability hint (its last answer) says the network is gone.
    package var isNetworkAvailable: Bool { availability.withLock { $0.isUsable } }

    /// The two flags behind ``isNetworkAvailable``.
    package var networkAvailability: NetworkAvailability { availability.withLock { $0 } }

    /// Changes the availability flags atomically.
    /// - Parameter change: Sets `hostSaysAvailable` and/or `hintSaysOffline`.
    /// - Returns: Whether requests became possible by this change (they were not before).
    package func updateNetworkAvailability(_ change: (inout NetworkAvailability) -> Void) -> Bool {
        availability.withLock { flags in
            let before = flags.isUsable
            change(&flags)
            return !before && flags.isUsable
        }
    }

    /// Installs the function called when a request got no HTTP answer (connect refused, reset,
    /// timeout, DNS: `.requestFailed` from ``HTTPSession``). It runs on the failing request's
    /// thread, before the error is thrown, so it must return at once and never wait for the
    /// event thread. Its argument is ``NetworkAvailability/hostWords`` when the request was
    /// started: a request in flight across an explicit call failed for the superseded word.
    package func onTransportFailure(_ handler: @escaping @Sendable (UInt64) -> Void) {
        transportFailureHandler.withLock { $0 = handler }
    }

    // MARK: Endpoints

    /// `GET /sync/v1/info` and the protocol check.
    /// - Returns: The server info.
    /// - Throws: `.requestFailed`, `.invalidServerData`, `.oldClient`, `.oldServer`, `.cancelled`.
    package func info(session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) -> ServerInfo {
        let response = try send(HTTPRequest(url: url.url("/sync/v1/info")), jwt: nil, session: session, cancellation: cancellation)
        let info = try ServerInfo(body: response.body)
        if info.protocolMin > Self.protocolVersion {
            throw LayerSyncError(.oldClient, "the server needs protocol \(info.protocolMin) or newer; this client speaks \(Self.protocolVersion)")
        }
        if info.protocolMax < Self.protocolVersion {
            throw LayerSyncError(.oldServer, "the server speaks protocol up to \(info.protocolMax); this client needs \(Self.protocolVersion)")
        }
        return info
    }

    /// `GET /sync/v1/documents/{id}/pdf`, streamed into a file, and checked against the
    /// answer's strong `ETag` (the quoted SHA-256 hex of the bytes, protocol.md): bytes that
    /// were garbled or cut on the way while `Content-Length` agreed are refused. An answer
    /// without such an ETag (none, weak, or not a SHA-256) is taken as it is.
    /// - Parameters:
    ///   - documentID: The document.
    ///   - jwt: The token.
    ///   - fileDescriptor: Where the bytes go.
    ///   - progress: Called with (bytes done, bytes total or -1).
    /// - Returns: The number of bytes received.
    /// - Throws: Mapped HTTP errors, `.requestFailed`, `.couldNotWriteToDisk`, `.cancelled`;
    ///   `.invalidServerData` when the bytes do not match the ETag's SHA-256.
    package func downloadPDF(documentID: String, jwt: String, fileDescriptor: Int32, progress: @escaping @Sendable (Int64, Int64) -> Void,
                     session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) {
        var request = HTTPRequest(url: url.url("/sync/v1/documents/\(ServerURL.encodeSegment(documentID))/pdf"))
        request.bodyFileDescriptor = fileDescriptor
        request.progress = progress
        request.timeoutSeconds = 0  // large files: rely on connect timeout + cancellation
        request.hashFileBody = true
        let response = try send(request, jwt: jwt, session: session, cancellation: cancellation)
        if let expected = Self.strongSHA256(etag: response.headers["etag"]), let received = response.fileSHA256, received != expected {
            throw LayerSyncError(.invalidServerData, "PDF download of \(documentID): the bytes received have SHA-256 \(received), "
                                 + "the answer's ETag says \(expected) (garbled or cut on the way)")
        }
    }

    /// The SHA-256 hex a strong ETag names (`"<64 hex digits>"`), `nil` for none, a weak one, or another shape.
    static func strongSHA256(etag: String?) -> String? {
        guard let etag, etag.hasPrefix("\""), etag.hasSuffix("\""), etag.count == 66 else { return nil }
        let digest = String(etag.dropFirst().dropLast()).lowercased()
        return SHA256.isDigest(digest) ? digest : nil
    }

    /// `GET .../records?since=` (snapshot or delta page).
    /// - Parameter epoch: The epoch the client holds (the page is checked against it and `since`:
    ///   ``LayerPage/init(body:since:epoch:)``), `nil` for none.
    /// - Throws: `.invalidServerData` for a page that fails the checks, and the other mapped errors.
    package func records(documentID: String, layer: String, since: Int64, epoch: String? = nil, limit: Int? = nil, jwt: String,
                 session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) -> LayerPage {
        var path = layerPath(documentID, layer) + "/records?since=\(since)"
        if let limit { path += "&limit=\(limit)" }
        let response = try send(HTTPRequest(url: url.url(path)), jwt: jwt, session: session, cancellation: cancellation)
        return try LayerPage(body: response.body, since: since, epoch: epoch)
    }

    /// `GET .../records?since=&previous_permissions=&previous_user_id=`: the delta page of a
    /// token whose collaboration permissions (or user) differ from the previous token's, with
    /// `regranted` (protocol.md "Reauthentication with other grants").
    /// - Parameters:
    ///   - previousPermissions: The previous token's claim entries, `nil` when it had none.
    ///   - previousUserID: The previous token's `user_id`.
    /// - Throws: `.invalidServerData` for a page that fails the checks, and the other mapped errors.
    package func regrantedRecords(documentID: String, layer: String, since: Int64, epoch: String?,
                                  previousPermissions: [String]?, previousUserID: String?, jwt: String,
                                  session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) -> LayerPage {
        let claim = previousPermissions.map { JSONValue.array($0.map(JSONValue.string)) } ?? .null
        var path = layerPath(documentID, layer) + "/records?since=\(since)&previous_permissions=" + Self.queryEscaped(claim.jsonText)
        if let previousUserID { path += "&previous_user_id=" + Self.queryEscaped(previousUserID) }
        let response = try send(HTTPRequest(url: url.url(path)), jwt: jwt, session: session, cancellation: cancellation)
        return try LayerPage(body: response.body, since: since, epoch: epoch, regranted: true)
    }

    /// Percent-encodes a query parameter value (RFC 3986 unreserved characters stay).
    static func queryEscaped(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF")
                out += "%" + String(hex[Int(byte >> 4)]) + String(hex[Int(byte & 15)])
            }
        }
        return out
    }

    /// `GET .../changes?since=&wait=` (long-poll).
    /// - Parameter epoch: The epoch the client holds (see ``records(documentID:layer:since:epoch:limit:jwt:session:cancellation:)``).
    /// - Throws: `.invalidServerData` for a page that fails the checks, and the other mapped errors.
    package func changes(documentID: String, layer: String, since: Int64, epoch: String?, waitSeconds: Int, jwt: String,
                 session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) -> LayerPage {
        var request = HTTPRequest(url: url.url(layerPath(documentID, layer) + "/changes?since=\(since)&wait=\(waitSeconds)"))
        request.timeoutSeconds = requestTimeout + Double(waitSeconds)
        let response = try send(request, jwt: jwt, session: session, cancellation: cancellation)
        return try LayerPage(body: response.body, since: since, epoch: epoch)
    }

    /// `POST .../sync`.
    /// - Parameters:
    ///   - body: The exact request body.
    ///   - request: What the body claims and carries (the answer is checked against it:
    ///     ``SyncAnswer/init(body:request:)``).
    /// - Returns: The decoded answer.
    /// - Throws: `.payloadLimitExceeded` for 413, `.invalidServerData` for an answer that fails
    ///   the checks, and the other mapped errors.
    package func sync(documentID: String, layer: String, body: [UInt8], request sent: SyncAnswer.Request, jwt: String,
              session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) -> SyncAnswer {
        var request = HTTPRequest(method: "POST", url: url.url(layerPath(documentID, layer) + "/sync"))
        request.headers = ["Content-Type: application/json"]
        request.body = body
        let response = try send(request, jwt: jwt, session: session, cancellation: cancellation)
        return try SyncAnswer(body: response.body, request: sent)
    }

    /// `GET .../records/{rid}/history`: the kept versions, newest first.
    /// - Returns: The versions.
    /// - Throws: `.invalidDocument` (404: nothing kept) and the other mapped errors.
    package func history(documentID: String, layer: String, recordID: String, jwt: String,
                 session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) -> [ServerRecord] {
        let path = layerPath(documentID, layer) + "/records/\(ServerURL.encodeSegment(recordID))/history"
        let response = try send(HTTPRequest(url: url.url(path)), jwt: jwt, session: session, cancellation: cancellation)
        guard let json = try? JSONValue.parse(bytes: response.body), let items = json["versions"]?.arrayValue else {
            throw LayerSyncError(.invalidServerData, "history answer without versions")
        }
        var versions: [ServerRecord] = []
        for (index, item) in items.enumerated() {
            let version = try ServerRecord(json: item, name: "history answer: versions[\(index)]")
            guard version.id == recordID else {
                throw LayerSyncError(.invalidServerData, "history answer: versions[\(index)] is record \(version.id), not \(recordID)")
            }
            versions.append(version)
        }
        return versions
    }

    /// `POST .../records/{rid}/rollback` or `.../restore`: writes an older version (or the last
    /// live one) as a new revision.
    /// - Parameters:
    ///   - operation: `"rollback"` or `"restore"`.
    ///   - revision: The kept version to roll back to (rollback only).
    ///   - baseRevision: The record's revision the caller knows, or `nil`.
    /// - Returns: The record as written.
    /// - Throws: `.conflict` (409), `.invalidDocument` (404), `.invalidRequest` (400), and the other mapped errors.
    package func revive(_ operation: String, documentID: String, layer: String, recordID: String, revision: Int64?,
                baseRevision: Int64?, jwt: String, session: HTTPSession,
                cancellation: TransferCancellation) throws(LayerSyncError) -> ServerRecord {
        var request = HTTPRequest(method: "POST", url: url.url(layerPath(documentID, layer)
            + "/records/\(ServerURL.encodeSegment(recordID))/\(operation)"))
        var body = JSONObject()
        if let revision { body["revision"] = .integer(revision) }
        if let baseRevision { body["base_revision"] = .integer(baseRevision) }
        request.headers = ["Content-Type: application/json"]
        request.body = JSONValue.object(body).jsonBytes
        let response = try send(request, jwt: jwt, session: session, cancellation: cancellation)
        guard let json = try? JSONValue.parse(bytes: response.body), let record = json["record"] else {
            throw LayerSyncError(.invalidServerData, "\(operation) answer without record")
        }
        let written = try ServerRecord(json: record, name: "\(operation) answer: record")
        guard written.id == recordID else {
            throw LayerSyncError(.invalidServerData, "\(operation) answer: record \(written.id) is not \(recordID)")
        }
        return written
    }

    /// `GET .../deleted?since=` pages, all of them: the layer's tombstones, each with
    /// `last_content` (the newest kept live version, or null).
    /// - Returns: The entries, in revision order, each page checked (``DeletedPage/init(body:since:epoch:)``).
    /// - Throws: `.invalidServerData` for a page that fails the checks, and the other mapped errors.
    package func deleted(documentID: String, layer: String, jwt: String, session: HTTPSession,
                 cancellation: TransferCancellation) throws(LayerSyncError) -> [DeletedPage.Entry] {
        var entries: [DeletedPage.Entry] = []
        var since: Int64 = 0
        var epoch: String?
        while true {
            let path = layerPath(documentID, layer) + "/deleted?since=\(since)"
            let response = try send(HTTPRequest(url: url.url(path)), jwt: jwt, session: session, cancellation: cancellation)
            let page = try DeletedPage(body: response.body, since: since, epoch: epoch)
            entries += page.entries
            guard page.hasMore else { return entries }
            epoch = page.epoch
            since = page.nextSince  // above `since`: the page checks say so
        }
    }

    /// `PUT documents/{id}/attachments/{sha256}`: uploads an attachment (idempotent).
    /// - Throws: `.invalidRequest` (hash mismatch), `.payloadLimitExceeded` (413), and the other mapped errors.
    package func putAttachment(documentID: String, id: String, bytes: [UInt8], contentType: String, jwt: String,
                       session: HTTPSession, cancellation: TransferCancellation) throws(LayerSyncError) {
        var request = HTTPRequest(method: "PUT", url: url.url("/sync/v1/documents/\(ServerURL.encodeSegment(documentID))/attachments/\(id)"))
        request.headers = ["Content-Type: \(contentType)"]
        request.body = bytes
        _ = try send(request, jwt: jwt, session: session, cancellation: cancellation)
    }

    /// `GET documents/{id}/attachments/{sha256}`.
    /// - Returns: The bytes and their content type.
    /// - Throws: `.invalidDocument` (404) and the other mapped errors.
    package func getAttachment(documentID: String, id: String, jwt: String, session: HTTPSession,
                       cancellation: TransferCancellation) throws(LayerSyncError) -> (bytes: [UInt8], contentType: String) {
        let request = HTTPRequest(url: url.url("/sync/v1/documents/\(ServerURL.encodeSegment(documentID))/attachments/\(id)"))
        let response = try send(request, jwt: jwt, session: session, cancellation: cancellation, accept: "*/*")
        return (response.body, response.headers["content-type"] ?? "application/octet-stream")
    }

    // MARK: Plumbing

    private func layerPath(_ documentID: String, _ layer: String) -> String {
        "/sync/v1/documents/\(ServerURL.encodeSegment(documentID))/layers/\(ServerURL.layerSegment(layer))"
    }

    /// Sends a request and maps a non-2xx answer through the error envelope.
    private func send(_ request: HTTPRequest, jwt: String?, session: HTTPSession,
                      cancellation: TransferCancellation, accept: String = "application/json") throws(LayerSyncError) -> HTTPResponse {
        try send(request, jwt: jwt, session: session, cancellation: cancellation, accept: accept, protocolVersion: Self.protocolVersion)
    }

    /// Sends a request speaking `protocolVersion` (2 for the change stream's endpoints) and
    /// maps a non-2xx answer through the error envelope. No request is made while the network
    /// is marked unavailable.
    func send(_ request: HTTPRequest, jwt: String?, session: HTTPSession, cancellation: TransferCancellation,
              accept: String, protocolVersion: Int) throws(LayerSyncError) -> HTTPResponse {
        let (request, flags) = try outgoing(request, jwt: jwt, accept: accept, protocolVersion: protocolVersion)
        return try answer(of: request, Result { () throws(LayerSyncError) in try session.perform(request, cancellation: cancellation) },
                          flags: flags)
    }

    /// ``send(_:jwt:session:cancellation:accept:protocolVersion:)`` on a transfer group's thread
    /// (the change streams, ``HTTPTransferGroup``): starts the request and returns; `completion`
    /// gets the mapped answer on that thread when the transfer ends.
    func start(_ request: HTTPRequest, jwt: String?, group: HTTPTransferGroup, cancellation: TransferCancellation, accept: String,
               protocolVersion: Int, completion: @escaping @Sendable (Result<HTTPResponse, LayerSyncError>) -> Void) {
        let flags: NetworkAvailability
        let outgoing: HTTPRequest
        do throws(LayerSyncError) {
            (outgoing, flags) = try self.outgoing(request, jwt: jwt, accept: accept, protocolVersion: protocolVersion)
        } catch {
            completion(.failure(error))
            return
        }
        group.start(outgoing, cancellation: cancellation) { [self] result in
            completion(Result { () throws(LayerSyncError) in try answer(of: outgoing, result, flags: flags) })
        }
    }

    /// The request as it goes out (protocol, `Accept` and `Authorization` headers, the default
    /// timeout) and the availability flags it was sent under.
    /// - Throws: `.requestFailed` while the network is marked unavailable (no request is made).
    private func outgoing(_ request: HTTPRequest, jwt: String?, accept: String,
                          protocolVersion: Int) throws(LayerSyncError) -> (HTTPRequest, NetworkAvailability) {
        let flags = networkAvailability
        guard flags.hostSaysAvailable else {
            throw LayerSyncError(.requestFailed, "the network is marked unavailable (setNetworkAvailable(false)); no request was made")
        }
        guard !flags.hintSaysOffline else {
            throw LayerSyncError(.requestFailed, "the host's reachability hint says the network is unavailable; no request was made")
        }
        var request = request
        request.headers.append("LayerSync-Protocol: \(protocolVersion)")
        request.headers.append("Accept: \(accept)")
        if let jwt { request.headers.append("Authorization: Bearer \(jwt)") }
        if request.timeoutSeconds == 30 { request.timeoutSeconds = requestTimeout }
        return (request, flags)
    }

    /// The answer of `request` mapped through the error envelope; a transfer that got no HTTP
    /// answer at all tells the transport failure handler first.
    private func answer(of request: HTTPRequest, _ result: Result<HTTPResponse, LayerSyncError>,
                        flags: NetworkAvailability) throws(LayerSyncError) -> HTTPResponse {
        let response: HTTPResponse
        switch result {
        case .success(let answer): response = answer
        case .failure(let error):
            // No HTTP answer at all (HTTPSession throws `.requestFailed` only then).
            if error.code == .requestFailed, let handler = transportFailureHandler.withLock({ $0 }) { handler(flags.hostWords) }
            throw error
        }
        if (200..<300).contains(response.status) { return response }
        var message = "HTTP \(response.status)"
        var envelopeCode: String?
        if let envelope = try? JSONValue.parse(bytes: response.body), let error = envelope["error"] {
            envelopeCode = error["code"]?.stringValue
            message = "\(envelopeCode ?? "error"): \(error["message"]?.stringValue ?? "")"
        }
        let code: ErrorCode
        switch response.status {
        case 400: code = .invalidRequest
        // 403 `forbidden`: the token is good, its collaboration permissions refuse this record
        // (rollback/restore); not an authentication failure (protocol.md "Error envelope").
        case 403 where envelopeCode == "forbidden": code = .forbidden
        case 401, 403: code = .accessDenied
        case 404: code = .invalidDocument
        case 409: code = envelopeCode == "epoch_mismatch" ? .serverReset : .conflict
        case 413: code = .payloadLimitExceeded
        case 426: code = .oldClient
        case 500...: code = .requestFailed
        default: code = .unknown
        }
        throw LayerSyncError(code, "\(request.method) \(request.url): \(message)", httpStatus: response.status)
    }
}
