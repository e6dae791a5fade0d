import Foundation
import Synchronization
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel
@testable import LayerSyncStore
@testable import LayerSyncTransport

/// A server answer is checked before anything of it is applied (protocol.md "What a client
/// checks"): real answers of the real server, garbled on the way by ``FaultProxy``
/// (`.mutateResponse`) or handed garbled to the decoders, give `INVALID_SERVER_DATA`, leave the
/// store as it was, are retried with backoff (never in a tight loop), and once the server
/// answers correctly again the layer converges by itself.
@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class AnswerValidationTests {
    let server: TestServer

    init() throws {
        server = try TestServer()
    }

    /// One way of garbling an answer's body.
    struct Garble: Sendable, CustomStringConvertible {
        let description: String
        let change: @Sendable ([UInt8]) -> [UInt8]

        /// A garble of the answer's JSON object.
        static func json(_ name: String, _ edit: @escaping @Sendable (inout JSONObject) -> Void) -> Garble {
            Garble(description: name) { bytes in
                guard case .object(var object)? = try? JSONValue.parse(bytes: bytes) else { return bytes }
                edit(&object)
                return JSONValue.object(object).jsonBytes
            }
        }

        /// Edits the array under `key`.
        static func array(_ object: inout JSONObject, _ key: String, _ edit: (inout [JSONValue]) -> Void) {
            var items = object[key]?.arrayValue ?? []
            edit(&items)
            object[key] = .array(items)
        }

        /// Edits the object at `index` of an array.
        static func element(_ items: inout [JSONValue], _ index: Int, _ edit: (inout JSONObject) -> Void) {
            guard index < items.count, case .object(var object) = items[index] else { return }
            edit(&object)
            items[index] = .object(object)
        }

        /// Edits `content` of a record object.
        static func content(_ record: inout JSONObject, _ edit: (inout JSONObject) -> Void) {
            guard case .object(var content)? = record["content"] else { return }
            edit(&content)
            record["content"] = .object(content)
        }

        static func negated(_ value: JSONValue?) -> JSONValue { .number("-" + (value?.int64Value.map { String(max($0, 1)) } ?? "1")) }
    }

    /// Garbles common to every answer that carries records under `key` (a page's `records`,
    /// a sync answer's `changes`).
    static func recordGarbles(_ key: String) -> [Garble] {
        [
            .json("\(key): content.id differs from id") { o in Garble.array(&o, key) { Garble.element(&$0, 0) { Garble.content(&$0) { $0["id"] = .string("someone-else") } } } },
            .json("\(key): ids of two records swapped") { o in
                Garble.array(&o, key) { items in
                    guard items.count >= 2, let first = items[0]["id"], let second = items[1]["id"] else { return }
                    Garble.element(&items, 0) { $0["id"] = second }
                    Garble.element(&items, 1) { $0["id"] = first }
                }
            },
            .json("\(key): a record twice") { o in Garble.array(&o, key) { if let first = $0.first { $0.append(first) } } },
            .json("\(key): out of revision order") { o in Garble.array(&o, key) { $0.reverse() } },
            .json("\(key): negative record revision") { o in Garble.array(&o, key) { Garble.element(&$0, 0) { $0["revision"] = Garble.negated($0["revision"]) } } },
            .json("\(key): record revision as string") { o in Garble.array(&o, key) { Garble.element(&$0, 0) { $0["revision"] = .string("7") } } },
            .json("\(key): record id missing") { o in Garble.array(&o, key) { Garble.element(&$0, 0) { $0["id"] = nil } } },
            .json("\(key): record id too long") { o in
                let long = String(repeating: "x", count: 200)
                Garble.array(&o, key) { Garble.element(&$0, 0) { r in r["id"] = .string(long); Garble.content(&r) { $0["id"] = .string(long) } } }
            },
            .json("\(key): live record without content") { o in Garble.array(&o, key) { Garble.element(&$0, 0) { $0["content"] = .null } } },
            .json("\(key): deleted as string") { o in Garble.array(&o, key) { Garble.element(&$0, 0) { $0["deleted"] = .string("false") } } },
            .json("\(key) as object") { $0[key] = .object(JSONObject()) },
            .json("revision negative") { $0["revision"] = Garble.negated($0["revision"]) },
            .json("revision over 2^63-1") { $0["revision"] = .number("9223372036854775808") },
            .json("revision as string") { $0["revision"] = .string("12") },
            .json("revision below since") { $0["revision"] = .integer(1) },
            .json("next_since negative") { $0["next_since"] = .number("-1") },
            .json("has_more as string") { $0["has_more"] = .string("false") },
            .json("has_more without next_since moving") { $0["has_more"] = .bool(true); $0["next_since"] = .integer(0) },
            .json("epoch as number") { $0["epoch"] = .integer(5) },
            Garble(description: "truncated body") { Array($0.prefix($0.count / 2)) },
            Garble(description: "empty body") { _ in [] },
            Garble(description: "not an object") { _ in Array("[]".utf8) },
        ] + ["epoch", "revision", key, "has_more", "next_since"].map { name in .json("\(name) removed") { $0[name] = nil } }
    }

    /// Garbles of a `POST .../sync` answer.
    static let syncGarbles: [Garble] = recordGarbles("changes") + [
        .json("epoch_changed removed") { $0["epoch_changed"] = nil },
        .json("accepted removed") { $0["accepted"] = nil },
        .json("rejected removed") { $0["rejected"] = nil },
        .json("epoch differs without epoch_changed") { $0["epoch"] = .string("another-epoch") },
        .json("epoch_changed with the same epoch and changes") { $0["epoch_changed"] = .bool(true) },
        .json("accepted: change id not sent") { o in Garble.array(&o, "accepted") { Garble.element(&$0, 0) { $0["change_id"] = .string(ULID.generate()) } } },
        .json("accepted: record id of another record") { o in Garble.array(&o, "accepted") { Garble.element(&$0, 0) { $0["id"] = .string("another-record") } } },
        .json("accepted: negative revision") { o in Garble.array(&o, "accepted") { Garble.element(&$0, 0) { $0["revision"] = Garble.negated($0["revision"]) } } },
        .json("accepted: revision above the layer's") { o in Garble.array(&o, "accepted") { Garble.element(&$0, 0) { $0["revision"] = .number("9000000000") } } },
        .json("accepted: entry twice") { o in Garble.array(&o, "accepted") { if let first = $0.first { $0.append(first) } } },
        .json("accepted and rejected name one change") { o in
            guard let first = o["accepted"]?.arrayValue?.first else { return }
            Garble.array(&o, "rejected") { Garble.element(&$0, 0) { $0["change_id"] = first["change_id"] } }
        },
        .json("rejected: reason missing") { o in Garble.array(&o, "rejected") { Garble.element(&$0, 0) { $0["reason"] = nil } } },
        .json("rejected: server_record of another record") { o in
            let rejectedID = o["rejected"]?.arrayValue?.first?["id"]
            guard let other = o["changes"]?.arrayValue?.first(where: { $0["id"] != rejectedID }) else { return }
            Garble.array(&o, "rejected") { Garble.element(&$0, 0) { $0["server_record"] = other } }
        },
        .json("rejected: server_record with wrong content.id") { o in
            Garble.array(&o, "rejected") { Garble.element(&$0, 0) { r in
                guard case .object(var record)? = r["server_record"] else { return }
                Garble.content(&record) { $0["id"] = .string("someone-else") }
                r["server_record"] = .object(record)
            } }
        },
    ]

    /// Garbles of a `GET .../changes` or `.../records` page.
    static let pageGarbles: [Garble] = recordGarbles("records")

    /// The local store's state that an answer could change: cursor, epoch, records (with their
    /// server versions) and the queue (not whether a change is frozen: the request itself does that).
    func storeState(_ document: DocumentDescriptor) throws -> [String] {
        let store = document.store
        var state = ["since=\(try store.since())", "epoch=\(try store.epoch() ?? "")"]
        state += try store.withDatabase { db throws(LayerSyncError) -> [String] in
            var rows: [String] = []
            for row in try db.query("SELECT id, content, server_revision, server_content, server_deleted FROM records ORDER BY id") {
                rows.append("record " + row.map { String(describing: $0) }.joined(separator: "|"))
            }
            for row in try db.query("SELECT seq, change_id, record_id, op, content FROM pending_changes ORDER BY seq") {
                rows.append("pending " + row.map { String(describing: $0) }.joined(separator: "|"))
            }
            return rows
        }
        return state
    }

    func downloaded(_ client: TestClient, documentID: String = "doc") throws -> DocumentDescriptor {
        let document = try client.client.document(forJWT: try server.token(documentID: documentID, userID: "alice"))
        try document.download()
        let result = try #require(client.events.waitForDownload(document))
        if let error = result { throw error }
        return document
    }

    func sync(_ client: TestClient, _ document: DocumentDescriptor) throws -> LayerSyncError? {
        let start = client.events.count
        try document.sync()
        return try #require(client.events.waitForSyncEnd(document, after: start), "sync did not end")
    }

    func admin(_ method: String, _ path: String, body: String? = nil) throws -> Int {
        let session = HTTPSession(connectTimeoutSeconds: 2)
        var request = HTTPRequest(method: method, url: server.url + path)
        request.headers = ["Authorization: Token token=\"secret\"", "Content-Type: application/json"]
        request.body = body.map { Array($0.utf8) }
        return try session.perform(request, cancellation: TransferCancellation()).status
    }

    /// Waits (bounded) until `condition` holds.
    func eventually(timeout: Double = 45, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try condition() { return true }
            usleep(100_000)
        }
        return try condition()
    }

    /// Whether the client's records are the server's (same ids, same `note`s).
    func converged(_ document: DocumentDescriptor) throws -> Bool {
        let local = try localRecords(document)
        let remote = try server.serverAnnotations(documentID: document.documentID)
        return Set(local.keys) == Set(remote.keys) && local.allSatisfy { remote[$0.key]?["note"] == $0.value["note"] }
    }

    static func isSync(_ head: String) -> Bool { head.hasPrefix("POST ") && head.contains("/sync ") }
    static func isLongPoll(_ head: String) -> Bool { head.hasPrefix("GET ") && head.contains("/changes?") }

    // MARK: The decoders over garbled real answers

    @Test func garbledPagesOfTheRealServerAreInvalidServerData() throws {
        try server.upload(documentID: "doc")
        let token = try server.token(documentID: "doc")
        let session = HTTPSession(connectTimeoutSeconds: 2)
        var request = HTTPRequest(url: server.url + "/sync/v1/documents/doc/layers/~/changes?since=0&wait=0")
        request.headers = ["Authorization: Bearer \(token)"]
        let body = try session.perform(request, cancellation: TransferCancellation()).body
        let page = try LayerPage(body: body, since: 0, epoch: nil)
        #expect(page.records.count >= 2, "the corpus PDF's layer has records")
        for garble in Self.pageGarbles {
            let garbled = garble.change(body)
            #expect(garbled != body ? true : false, "\(garble) changed nothing")
            #expect(throws: LayerSyncError.self, "\(garble)") {
                do throws(LayerSyncError) {
                    _ = try LayerPage(body: garbled, since: 0, epoch: page.epoch)
                } catch {
                    #expect(error.code == .invalidServerData && !error.message.isEmpty, "\(garble): \(error)")
                    throw error
                }
            }
        }
        // Context the page is checked against: the since asked for, the epoch held.
        #expect(throws: LayerSyncError.self) { _ = try LayerPage(body: body, since: page.revision + 1, epoch: page.epoch) }
        _ = try LayerPage(body: body, since: 0, epoch: "another-epoch")  // a new epoch may start lower
        // A real sync answer against a request it does not answer.
        var post = HTTPRequest(method: "POST", url: server.url + "/sync/v1/documents/doc/layers/~/sync")
        post.headers = ["Authorization: Bearer \(token)", "Content-Type: application/json"]
        let changeID = ULID.generate()
        post.body = Array(#"{"client_id":"c","epoch":"\#(page.epoch)","since":0,"changes":[{"change_id":"\#(changeID)","op":"create","id":"n1","content":{"id":"n1","v":2,"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"icon":"comment","text":{"format":"plain","value":""}}}]}"#.utf8)
        let answer = try session.perform(post, cancellation: TransferCancellation()).body
        let sent = SyncAnswer.Request(epoch: page.epoch, since: 0, changes: [(changeID, "n1")])
        #expect(try SyncAnswer(body: answer, request: sent).accepted.count == 1)
        #expect(throws: LayerSyncError.self) { _ = try SyncAnswer(body: answer, request: SyncAnswer.Request(epoch: page.epoch, since: 0, changes: [])) }
        #expect(throws: LayerSyncError.self) { _ = try SyncAnswer(body: answer, request: SyncAnswer.Request(epoch: page.epoch, since: 0, changes: [(changeID, "n2")])) }
        #expect(throws: LayerSyncError.self) { _ = try SyncAnswer(body: answer, request: SyncAnswer.Request(epoch: "other", since: 0, changes: [(changeID, "n1")])) }
    }

    // MARK: End to end: nothing of a garbled answer is applied, then it heals

    @Test func aGarbledSyncAnswerAppliesNothingAndTheLayerHealsAfterwards() throws {
        try server.upload(documentID: "doc")
        let proxy = try FaultProxy(upstreamPort: server.port)
        let client = try server.makeClient("a", url: proxy.url)
        let document = try downloaded(client)
        let existing = try #require(try localRecords(document).keys.sorted().first)
        // The answer will hold an accepted change (a new note), a rejected one (an update of a
        // record someone else changed meanwhile) and server changes (two notes made by the admin API).
        let created = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("mine")))["id"]?.stringValue)
        var updated = try JSONValue.parse(try document.annotation(id: existing))
        if case .object(var object) = updated { object["note"] = .string("local edit"); updated = .object(object) }
        _ = try document.updateAnnotation(json: updated.jsonText)
        #expect(try admin("PUT", "/api/documents/doc/annotations/\(existing)", body: "{\"content\": \(TestServer.note("server edit", id: existing))}") == 200)
        for text in ["admin one", "admin two"] {
            #expect(try admin("POST", "/api/documents/doc/annotations", body: "{\"content\": \(TestServer.note(text))}") == 200)
        }
        let before = try storeState(document)
        let original = Mutex<[UInt8]>([])
        for garble in Self.syncGarbles {
            proxy.setRule { head in
                guard Self.isSync(head) else { return .forward }
                return .mutateResponse { body in
                    original.withLock { $0 = body }
                    return garble.change(body)
                }
            }
            let error = try sync(client, document)
            #expect(error?.code == .invalidServerData, "\(garble): \(String(describing: error))")
            let after = try storeState(document)
            #expect(after == before, "\(garble) changed the store: \(after.filter { !before.contains($0) }) \(before.filter { !after.contains($0) })")
            let body = original.withLock { $0 }
            #expect(garble.change(body) != body ? true : false, "\(garble) changed nothing")
        }
        let answer = try JSONValue.parse(bytes: original.withLock { $0 })
        #expect(answer["accepted"]?.arrayValue?.count == 1 && answer["rejected"]?.arrayValue?.count == 1
                && (answer["changes"]?.arrayValue?.count ?? 0) >= 2, "the garbled answer had every part")
        // Healed: the next sync applies the real answer; the layer converges and the local note is on the server.
        proxy.setRule { _ in .forward }
        #expect(try sync(client, document) == nil)
        #expect(!document.hasUnsyncedChanges)
        #expect(try server.serverAnnotations(documentID: "doc")[created]?["note"]?.stringValue == "mine")
        #expect(try converged(document))
        let rejected = client.events.all.contains { if case .didRejectChanges = $0 { return true }; return false }
        #expect(rejected, "the rejected update was reported")
    }

    @Test func aGarbledSyncAnswerIsRetriedWithBackoffAndResumesByItself() throws {
        try server.upload(documentID: "doc")
        let proxy = try FaultProxy(upstreamPort: server.port)
        let client = try server.makeClient("a", url: proxy.url, syncDelay: 0.1)
        let document = try downloaded(client)
        proxy.setRule { head in Self.isSync(head) ? .mutateResponse { _ in Array(#"{"epoch":"x"}"#.utf8) } : .forward }
        let created = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("mine")))["id"]?.stringValue)
        let start = Date()
        Thread.sleep(forTimeInterval: 5)
        let attempts = proxy.requestLines.filter { $0.hasPrefix("POST ") && $0.contains("/sync ") }.count
        // Retried by itself, with pauses of up to 1, 2, 4, 8 ... s (full jitter): a handful, not a loop.
        #expect(attempts >= 2, "the failed sync was retried by itself")
        #expect(attempts <= 12, "\(attempts) sync requests in \(Date().timeIntervalSince(start)) s: a tight loop")
        #expect(document.hasUnsyncedChanges)
        proxy.setRule { _ in .forward }
        #expect(try eventually { try server.serverAnnotations(documentID: "doc")[created] != nil && !document.hasUnsyncedChanges },
                "the sync resumed by itself once the server answered correctly; events: \(client.events.all.suffix(6)); requests: \(proxy.requestLines.suffix(6))")
        #expect(try converged(document))
    }

    @Test func aGarbledLongPollAnswerBacksOffAndListeningResumesAfterHealing() throws {
        try server.upload(documentID: "doc")
        let proxy = try FaultProxy(upstreamPort: server.port)
        let client = try server.makeClient("a", url: proxy.url)
        let document = try downloaded(client)
        // Changes the client has not seen: the server answers each long-poll at once.
        for text in ["admin one", "admin two"] {
            #expect(try admin("POST", "/api/documents/doc/annotations", body: "{\"content\": \(TestServer.note(text))}") == 200)
        }
        let before = try storeState(document)
        let garbles = Self.pageGarbles
        let served = Atomic<Int>(0)
        proxy.setRule { head in
            guard Self.isLongPoll(head) else { return .forward }
            let index = served.add(1, ordering: .relaxed).newValue
            return .mutateResponse(garbles[index % garbles.count].change)
        }
        try document.startListening()
        Thread.sleep(forTimeInterval: 5)
        let polls = proxy.requestLines.filter { $0.hasPrefix("GET ") && $0.contains("/changes?") }.count
        #expect(polls >= 2, "the long-poll was retried")
        #expect(polls <= 12, "\(polls) long-polls in 5 s: a tight loop")
        #expect(try storeState(document) == before, "a garbled long-poll answer changed the store")
        #expect(document.isListening)
        proxy.setRule { _ in .forward }
        #expect(try eventually { try converged(document) }, "listening resumed once the server answered correctly")
        document.stopListening()
    }

    // MARK: Gaps closed: the long-poll epoch, the deleted list, server errors

    @Test func aGarbledButWellFormedLongPollEpochIsRefusedWithoutADownload() throws {
        try server.upload(documentID: "doc")
        let proxy = try FaultProxy(upstreamPort: server.port)
        let client = try server.makeClient("a", url: proxy.url)
        let document = try downloaded(client)
        #expect(try admin("POST", "/api/documents/doc/annotations", body: "{\"content\": \(TestServer.note("admin one"))}") == 200)
        let before = try storeState(document)
        let snapshotsBefore = proxy.requestLines.filter { $0.contains("/records?since=0 ") }.count
        proxy.setRule { head in
            guard Self.isLongPoll(head) else { return .forward }
            return .mutateResponse(Garble.json("epoch swapped") { $0["epoch"] = .string("0b0c0d0e-garbled-but-well-formed") }.change)
        }
        try document.startListening()
        Thread.sleep(forTimeInterval: 5)
        let polls = proxy.requestLines.filter { $0.hasPrefix("GET ") && $0.contains("/changes?") }.count
        #expect(polls >= 2, "the long-poll was retried")
        #expect(polls <= 12, "\(polls) long-polls in 5 s: a tight loop")
        #expect(proxy.requestLines.filter { $0.contains("/records?since=0 ") }.count == snapshotsBefore,
                "a garbled epoch made the client download the snapshot again")
        #expect(try storeState(document) == before, "a garbled long-poll epoch changed the store")
        let reset = client.events.all.contains { if case .didResetLayer = $0 { return true }; return false }
        #expect(!reset, "a garbled epoch was reported as a layer reset")
        // Ill-formed epochs are refused by the decoder itself.
        let page = Array(#"{"epoch":"","revision":1,"records":[],"has_more":false,"next_since":1}"#.utf8)
        #expect(throws: LayerSyncError.self) { _ = try LayerPage(body: page, since: 0, epoch: "e") }
        let control = Array(#"{"epoch":"a\u0001b","revision":1,"records":[],"has_more":false,"next_since":1}"#.utf8)
        #expect(throws: LayerSyncError.self) { _ = try LayerPage(body: control, since: 0, epoch: "e") }
        proxy.setRule { _ in .forward }
        #expect(try eventually { try converged(document) }, "listening resumed once the server answered correctly")
        document.stopListening()
    }

    @Test func garbledDeletedPagesAreInvalidServerData() throws {
        try server.upload(documentID: "doc")
        let token = try server.token(documentID: "doc")
        let ids = try server.serverAnnotations(documentID: "doc").keys.sorted()
        #expect(ids.count >= 2, "the corpus PDF's layer has records")
        for id in ids.prefix(2) { #expect(try admin("DELETE", "/api/documents/doc/annotations/\(id)") == 200) }
        let session = HTTPSession(connectTimeoutSeconds: 2)
        var request = HTTPRequest(url: server.url + "/sync/v1/documents/doc/layers/~/deleted?since=0")
        request.headers = ["Authorization: Bearer \(token)"]
        let body = try session.perform(request, cancellation: TransferCancellation()).body
        let page = try DeletedPage(body: body, since: 0, epoch: nil)
        #expect(page.entries.count == 2 && page.entries.allSatisfy { $0.lastContent?["id"]?.stringValue == $0.id })
        let garbles: [Garble] = [
            .json("records: ids of two records swapped") { o in
                Garble.array(&o, "records") { items in
                    guard items.count >= 2, let first = items[0]["id"], let second = items[1]["id"] else { return }
                    Garble.element(&items, 0) { $0["id"] = second }
                    Garble.element(&items, 1) { $0["id"] = first }
                }
            },
            .json("records: an entry twice") { o in Garble.array(&o, "records") { if let first = $0.first { $0.append(first) } } },
            .json("records: out of revision order") { o in Garble.array(&o, "records") { $0.reverse() } },
            .json("records: negative revision") { o in Garble.array(&o, "records") { Garble.element(&$0, 0) { $0["revision"] = Garble.negated($0["revision"]) } } },
            .json("records: not a tombstone") { o in Garble.array(&o, "records") { Garble.element(&$0, 0) { r in r["deleted"] = .bool(false); r["content"] = r["last_content"] } } },
            .json("records: last_content of another record") { o in Garble.array(&o, "records") { Garble.element(&$0, 0) { r in
                guard case .object(var content)? = r["last_content"] else { return }
                content["id"] = .string("someone-else")
                r["last_content"] = .object(content)
            } } },
            .json("records: last_content a string") { o in Garble.array(&o, "records") { Garble.element(&$0, 0) { $0["last_content"] = .string("x") } } },
            .json("records: a tombstone without last_content") { o in Garble.array(&o, "records") { Garble.element(&$0, 0) { $0["last_content"] = nil } } },
            .json("records: id missing") { o in Garble.array(&o, "records") { Garble.element(&$0, 0) { $0["id"] = nil } } },
            .json("records as object") { $0["records"] = .object(JSONObject()) },
            .json("revision negative") { $0["revision"] = Garble.negated($0["revision"]) },
            .json("has_more without next_since moving") { $0["has_more"] = .bool(true); $0["next_since"] = .integer(0) },
            .json("epoch as number") { $0["epoch"] = .integer(5) },
            Garble(description: "truncated body") { Array($0.prefix($0.count / 2)) },
        ] + ["epoch", "revision", "records", "has_more", "next_since"].map { name in .json("\(name) removed") { $0[name] = nil } }
        for garble in garbles {
            let garbled = garble.change(body)
            #expect(garbled != body ? true : false, "\(garble) changed nothing")
            #expect(throws: LayerSyncError.self, "\(garble)") {
                do throws(LayerSyncError) {
                    _ = try DeletedPage(body: garbled, since: 0, epoch: nil)
                } catch {
                    #expect(error.code == .invalidServerData && !error.message.isEmpty, "\(garble): \(error)")
                    throw error
                }
            }
        }
        // A later page of another epoch than the first.
        #expect(throws: LayerSyncError.self) { _ = try DeletedPage(body: body, since: 0, epoch: "another-epoch") }
    }

    @Test func aServerErrorIsRetriedWithBackoffAndSyncResumesByItself() throws {
        try server.upload(documentID: "doc")
        let proxy = try FaultProxy(upstreamPort: server.port)
        let client = try server.makeClient("a", url: proxy.url, syncDelay: 0.1)
        let document = try downloaded(client)
        proxy.setRule { head in Self.isSync(head) ? .reply(503) : .forward }
        let created = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("mine")))["id"]?.stringValue)
        Thread.sleep(forTimeInterval: 5)
        let attempts = proxy.requestLines.filter { $0.hasPrefix("POST ") && $0.contains("/sync ") }.count
        #expect(attempts >= 2, "the sync that got 503 was retried by itself")
        #expect(attempts <= 12, "\(attempts) sync requests in 5 s after 503s: a tight loop")
        #expect(document.hasUnsyncedChanges)
        proxy.setRule { _ in .forward }
        #expect(try eventually { try server.serverAnnotations(documentID: "doc")[created] != nil && !document.hasUnsyncedChanges },
                "the sync resumed by itself once the server answered again; events: \(client.events.all.suffix(6))")
    }
}
