import Foundation
import Synchronization
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel
@testable import LayerSyncStore
@testable import LayerSyncTransport

/// The rules of docs/architecture.md §4 that make sync trustworthy, each against the real server
/// on loopback, some through ``FaultProxy`` (lost answers, injected 403/413).
@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class TrustRuleTests {
    let server: TestServer

    init() throws {
        server = try TestServer()
    }

    typealias Client = TestClient

    func makeClient(_ name: String, url: String? = nil, syncDelay: Double = -1, storage: String? = nil) throws -> Client {
        try server.makeClient(name, url: url, syncDelay: syncDelay, storage: storage)
    }

    func downloaded(_ client: Client, documentID: String, userID: String = "alice") throws -> DocumentDescriptor {
        let document = try client.client.document(forJWT: try server.token(documentID: documentID, userID: userID))
        try document.download()
        let result = try #require(client.events.waitForDownload(document))
        if let error = result { throw error }
        return document
    }

    /// Runs one sync cycle and returns its error (`nil` = finished).
    func sync(_ client: Client, _ document: DocumentDescriptor) throws -> LayerSyncError? {
        let start = client.events.count
        try document.sync()
        return try #require(client.events.waitForSyncEnd(document, after: start), "sync did not end")
    }

    /// Syncs until a cycle finishes cleanly (bounded).
    func syncUntilClean(_ client: Client, _ document: DocumentDescriptor, attempts: Int = 10) throws {
        for _ in 0..<attempts {
            if try sync(client, document) == nil, !document.hasUnsyncedChanges { return }
        }
        Issue.record("\(document.documentID) did not reach a clean sync")
    }

    /// Every change reported rejected (in events recorded at index `start` or later).
    func rejections(_ client: Client, after start: Int = 0) -> [RejectedChange] {
        client.events.all[start...].flatMap { event -> [RejectedChange] in
            if case .didRejectChanges(_, let list) = event { return list }
            return []
        }
    }

    /// The body size of a `POST .../sync` request, from the head a ``FaultProxy`` rule sees;
    /// `nil` for any other request.
    static func syncBodyLength(_ head: String) -> Int? {
        head.hasPrefix("POST ") && head.contains("/sync ") ? FaultProxy.contentLength(head) : nil
    }

    /// `GET .../records/{id}/history` through the sync API: the kept versions, newest first.
    func history(_ documentID: String, _ recordID: String) throws -> [JSONValue] {
        let token = try server.token(documentID: documentID)
        let body = try TestServer.httpGet(server.url + "/sync/v1/documents/\(documentID)/layers/~/records/\(recordID)/history",
                                          headers: ["Authorization": "Bearer \(token)"])
        return try JSONValue.parse(body)["versions"]?.arrayValue ?? []
    }

    func admin(_ method: String, _ path: String, body: String? = nil) throws -> Int {
        let session = HTTPSession(connectTimeoutSeconds: 2)
        var request = HTTPRequest(method: method, url: server.url + path)
        request.headers = ["Authorization: Token token=\"secret\"", "Content-Type: application/json"]
        request.body = body.map { Array($0.utf8) }
        return try session.perform(request, cancellation: TransferCancellation()).status
    }

    // MARK: Rule 2: a lost response never duplicates

    @Test func aLostResponseNeverDuplicatesCreatesUpdatesCommentsOrDeletes() throws {
        try server.upload(documentID: "doc")
        let drops = Atomic<Int>(0)
        let proxy = try FaultProxy(upstreamPort: server.port) { head in
            guard head.hasPrefix("POST "), head.contains("/sync ") else { return .forward }
            return drops.wrappingSubtract(1, ordering: .acquiringAndReleasing).oldValue > 0 ? .dropResponse : .forward
        }
        defer { proxy.stop() }
        let a = try makeClient("a", url: proxy.url)
        let document = try downloaded(a, documentID: "doc")

        /// Commits on the server but loses the answer twice (libcurl itself resends once on
        /// a reused connection that died before answering; the second loss reaches the engine),
        /// then lets the engine's retry through.
        func lossyRoundTrip() throws {
            drops.store(2, ordering: .releasing)
            let postsBefore = proxy.requestLines.filter { $0.hasPrefix("POST ") }.count
            var failures: [LayerSyncError] = []
            for _ in 0..<4 {
                guard let failure = try sync(a, document) else { break }
                failures.append(failure)
                #expect(document.hasUnsyncedChanges)
            }
            #expect(!failures.isEmpty && failures.allSatisfy { $0.code == .requestFailed }, "\(failures)")
            #expect(!document.hasUnsyncedChanges)
            #expect(proxy.requestLines.filter { $0.hasPrefix("POST ") }.count - postsBefore == 3)
        }

        let root = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("root")))["id"]?.stringValue)
        try lossyRoundTrip()
        #expect(try history("doc", root).count == 1)

        _ = try document.updateAnnotation(json: TestServer.note("root, edited", id: root))
        try lossyRoundTrip()
        let versions = try history("doc", root)
        #expect(versions.count == 2)  // the update applied exactly once
        #expect(versions.first?["content"]?["note"] == .string("root, edited"))

        let comment = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("a reply", rootID: root)))["id"]?.stringValue)
        try lossyRoundTrip()
        #expect(try history("doc", comment).count == 1)
        #expect(try server.serverAnnotations(documentID: "doc")[comment]?["rootId"] == .string(root))

        try document.deleteAnnotation(id: root)
        try lossyRoundTrip()
        let remote = try server.serverAnnotations(documentID: "doc")
        #expect(remote[root] == nil && remote[comment] == nil)
        #expect(try history("doc", root).count == 3)
        #expect(rejections(a).isEmpty, "a retried change was rejected: \(rejections(a))")
        #expect(try localRecords(document) == remote)
        try a.client.shutdown()
    }

    // MARK: Rule 3: first writer wins, identically everywhere

    enum Edit: CustomStringConvertible {
        case edit, delete
        var description: String { self == .edit ? "edit" : "delete" }
    }

    @Test(arguments: [(Edit.edit, Edit.edit), (.edit, .delete), (.delete, .edit)])
    func conflictsAreWonByTheFirstWriterInBothOrders(first: Edit, second: Edit) throws {
        for order in 0..<2 {
            // Rule 4 too: the later writer's change ids claim an earlier time (skewed clock);
            // only the server's order counts.
            let documentID = "doc-\(first)-\(second)-\(order)"
            try server.upload(documentID: documentID)
            let a = try makeClient("a-\(documentID)")
            let b = try makeClient("b-\(documentID)")
            let docA = try downloaded(a, documentID: documentID)
            let docB = try downloaded(b, documentID: documentID, userID: "bob")
            let id = try #require(try localRecords(docA).keys.sorted().first)
            func apply(_ edit: Edit, _ document: DocumentDescriptor, _ text: String) throws {
                switch edit {
                case .edit: _ = try document.updateAnnotation(json: TestServer.note(text, id: id))
                case .delete: try document.deleteAnnotation(id: id)
                }
            }
            // `first` is made first locally, but who syncs first depends on `order`.
            try apply(first, docA, "from a")
            try apply(second, docB, "from b")
            let (winner, loser) = order == 0 ? ((a, docA, first), (b, docB, second)) : ((b, docB, second), (a, docA, first))
            try skewChangeIDs(winner.1, milliseconds: 4_000_000_000_000)  // year 2096
            try skewChangeIDs(loser.1, milliseconds: 1_000)                // 1970
            #expect(try sync(winner.0, winner.1) == nil)
            #expect(try sync(loser.0, loser.1) == nil)
            #expect(try sync(winner.0, winner.1) == nil)
            let lost = rejections(loser.0)
            #expect(lost.map(\.recordID) == [id], "\(first)/\(second) order \(order): \(lost)")
            #expect(rejections(winner.0).isEmpty)
            let remote = try server.serverAnnotations(documentID: documentID)
            switch winner.2 {
            case .edit: #expect(remote[id]?["note"] == .string(winner.1 === docA ? "from a" : "from b"))
            case .delete: #expect(remote[id] == nil)
            }
            #expect(try localRecords(docA) == remote)
            #expect(try localRecords(docB) == remote)
            #expect(!docA.hasUnsyncedChanges && !docB.hasUnsyncedChanges)
            try a.client.shutdown()
            try b.client.shutdown()
        }
    }

    /// Rewrites a layer's queued change ids as ULIDs of another time (a skewed client clock).
    func skewChangeIDs(_ document: DocumentDescriptor, milliseconds: UInt64) throws {
        try document.store.withDatabase { db throws(LayerSyncError) in
            for row in try db.query("SELECT seq FROM pending_changes") {
                var generator = SystemRandomNumberGenerator()
                let id = ULID.encode(milliseconds: milliseconds, randomHigh: generator.next(), randomLow: generator.next())
                try db.query("UPDATE pending_changes SET change_id = ? WHERE seq = ?", [.text(id), row[0]])
            }
        }
    }

    // MARK: Rule 5: payload limits

    @Test func batchesAreHalvedOn413AndAChangeTooLargeAloneIsRejectedAlone() throws {
        try server.upload(documentID: "doc")
        // The server advertises 4 MiB; the proxy refuses bodies over 6000 bytes with 413.
        let proxy = try FaultProxy(upstreamPort: server.port) { head in
            guard let length = Self.syncBodyLength(head) else { return .forward }
            return length > 6000 ? .reply(413) : .forward
        }
        defer { proxy.stop() }
        let a = try makeClient("a", url: proxy.url)
        let document = try downloaded(a, documentID: "doc")
        var ids: [String] = []
        for index in 0..<24 {
            let text = "record \(index) " + String(repeating: "ü", count: 400)
            ids.append(try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note(text)))["id"]?.stringValue))
        }
        let huge = try #require(try JSONValue.parse(try document.createAnnotation(
            json: TestServer.note(String(repeating: "x", count: 7000))))["id"]?.stringValue)
        #expect(try sync(a, document) == nil)
        #expect(!document.hasUnsyncedChanges)
        let rejected = rejections(a)
        #expect(rejected.map(\.recordID) == [huge])
        #expect(rejected.first?.reason == "payload_too_large")
        #expect(rejected.first?.code == .payloadLimitExceeded)
        #expect(RejectedChange.jsonText(rejected).contains(#""code":19"#))
        let remote = try server.serverAnnotations(documentID: "doc")
        for id in ids { #expect(remote[id] != nil) }
        #expect(remote[huge] == nil)
        #expect(try document.record(idOrNil: huge) == nil)  // reverted to the server's (absent) version
        #expect(proxy.requestLines.filter { $0.hasPrefix("POST ") }.count > 2)  // it had to halve
        try a.client.shutdown()
    }

    /// A change in flight that turns out too large alone (413) is dropped alone: the edit the
    /// user made meanwhile, queued behind it, is sent in its place, for an update and for a
    /// create (which the edit then carries). Before, the edit went with the dropped change,
    /// unreported, and the record reverted to the server's version.
    @Test func anEditMadeWhileATooLargeChangeIsInFlightIsSentInItsPlace() throws {
        try server.upload(documentID: "doc")
        let entered = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        let proxy = try FaultProxy(upstreamPort: server.port) { head in
            guard let length = Self.syncBodyLength(head), length > 6000 else { return .forward }
            entered.signal()  // the large change is in flight: the test edits now
            _ = release.wait(timeout: .now() + 20)
            return .reply(413)
        }
        defer { proxy.stop() }
        let a = try makeClient("a", url: proxy.url)
        let document = try downloaded(a, documentID: "doc")
        let huge = String(repeating: "x", count: 7000)
        let updated = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("small")))["id"]?.stringValue)
        #expect(try sync(a, document) == nil)

        for (id, first) in [(updated, { _ = try document.updateAnnotation(json: TestServer.note(huge, id: updated)) }),
                            ("created-large", { _ = try document.createAnnotation(json: TestServer.note(huge, id: "created-large")) })] {
            try first()
            let start = a.events.count
            try document.sync()
            #expect(entered.wait(timeout: .now() + 30) == .success, "the large change was not sent")
            _ = try document.updateAnnotation(json: TestServer.note("fixed \(id)", id: id))  // while it is in flight
            release.signal()
            let end = try #require(a.events.waitForSyncEnd(document, after: start))
            #expect(end == nil, "\(String(describing: end))")
            #expect(!document.hasUnsyncedChanges)
            let rejected = rejections(a, after: start)
            #expect(rejected.map { [$0.recordID, $0.reason] } == [[id, "payload_too_large"]])
            #expect(rejected.first?.localJSON?.contains(huge) == true)  // the dropped version is reported
            let remote = try server.serverAnnotations(documentID: "doc")
            #expect(remote[id]?["note"]?.stringValue == "fixed \(id)", "\(String(describing: remote[id]))")
            #expect(try JSONValue.parse(try #require(try document.record(idOrNil: id)))["note"]?.stringValue == "fixed \(id)")
        }
        try a.client.shutdown()
    }

    /// A change over the client's limit found while the previous request is in flight (the
    /// pipelined next batch) is dropped only when that request ends. An edit made in between —
    /// the fix of what was too large — must be sent, not dropped with it.
    @Test func anEditOfAnOversizedChangeFoundWhilePipeliningIsSent() throws {
        let limited = try TestServer(extraArguments: ["--max-request-bytes", "4096"])
        defer { limited.stop() }
        try limited.upload(documentID: "doc")
        let entered = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        let held = Atomic<Int>(0)
        let proxy = try FaultProxy(upstreamPort: limited.port) { head in
            guard head.hasPrefix("POST "), head.contains("/sync "), held.add(1, ordering: .relaxed).newValue == 1 else { return .forward }
            entered.signal()  // the first request is in flight (the next batch is frozen meanwhile)
            _ = release.wait(timeout: .now() + 20)
            return .forward
        }
        defer { proxy.stop() }
        let a = try limited.makeClient("a", url: proxy.url)
        #expect(try #require(a.events.waitForValidation()).map(\.maxRequestBytes).get() == 4096)
        let document = try a.client.document(forJWT: try limited.token(documentID: "doc"))
        try document.download()
        #expect(try #require(a.events.waitForDownload(document)) == nil)
        let half = String(repeating: "h", count: 2000)
        _ = try document.createAnnotation(json: TestServer.note(half, id: "first"))   // batch 1
        _ = try document.createAnnotation(json: TestServer.note(half, id: "second"))  // batch 2 (no room in 1)
        _ = try document.createAnnotation(json: TestServer.note(String(repeating: "x", count: 5000), id: "big"))
        let start = a.events.count
        try document.sync()
        #expect(entered.wait(timeout: .now() + 30) == .success, "nothing was sent")
        // The next batch is taken meanwhile, "big" with it as oversized (and frozen): wait for that.
        let deadline = Date().addingTimeInterval(30)
        func bigIsFrozen() throws -> Bool {
            try document.store.withDatabase { db throws(LayerSyncError) in
                try db.query("SELECT attempted FROM pending_changes WHERE record_id = 'big'").first?.first?.integer == 1
            }
        }
        while try !bigIsFrozen() {
            try #require(Date() < deadline, "the pipelined batch never took the oversized change")
            usleep(10_000)
        }
        _ = try document.updateAnnotation(json: TestServer.note("fixed", id: "big"))
        release.signal()
        let end = try #require(a.events.waitForSyncEnd(document, after: start))
        #expect(end == nil, "\(String(describing: end))")
        if document.hasUnsyncedChanges { _ = try #require(a.events.waitForSyncEnd(document, after: a.events.count)) }
        let rejected = rejections(a, after: start)
        #expect(rejected.map { [$0.recordID, $0.reason] } == [["big", "payload_too_large"]])
        #expect(rejected.first?.localJSON?.contains("xxxx") == true, "\(String(describing: rejected.first?.localJSON))")
        let local = try document.record(idOrNil: "big")
        #expect(local.map { try? JSONValue.parse($0)["note"]?.stringValue } == "fixed", "\(String(describing: local))")
        let remote = try limited.serverAnnotations(documentID: "doc")
        #expect(remote["big"]?["note"]?.stringValue == "fixed", "\(String(describing: remote["big"]))")
        #expect(remote["first"] != nil && remote["second"] != nil)
        try a.client.shutdown()
    }

    // MARK: Rule 6: an expired token mid-batch

    @Test func anAuthFailureIsReportedOnceWithoutARetryStormAndNothingIsLost() throws {
        try server.upload(documentID: "doc")
        let denied = Atomic<Bool>(false)
        let proxy = try FaultProxy(upstreamPort: server.port) { head in
            denied.load(ordering: .acquiring) && head.contains("/sync/v1/documents/") ? .reply(403) : .forward
        }
        defer { proxy.stop() }
        let a = try makeClient("a", url: proxy.url, syncDelay: 0.05)
        let document = try downloaded(a, documentID: "doc")
        try document.startListening()
        for index in 0..<5 { _ = try document.createAnnotation(json: TestServer.note("before \(index)")) }
        denied.store(true, ordering: .releasing)  // the token "expires" now
        let failure = try #require(a.events.wait { event -> LayerSyncError? in
            if case .didFailAuthentication(_, let error) = event { return error }; return nil
        })
        #expect(failure.code == .accessDenied)
        // More edits and explicit syncs while the token is bad: no request storm.
        let requestsAtFailure = proxy.requestLines.count
        var ids: [String] = []
        for index in 0..<5 {
            ids.append(try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("after \(index)")))["id"]?.stringValue))
            #expect(try sync(a, document)?.code == .accessDenied)
        }
        // The listen loop and the debounce stay quiet too; wait for a few debounce periods' worth of events.
        _ = a.events.wait(timeout: 1) { _ -> Bool? in nil }
        #expect(proxy.requestLines.count - requestsAtFailure <= 1, "requests after the failure: \(proxy.requestLines.suffix(8))")
        #expect(a.events.all.filter { if case .didFailAuthentication = $0 { return true }; return false }.count == 1)
        #expect(document.hasUnsyncedChanges && document.state == .dirty)
        // Reauthentication resumes everything.
        denied.store(false, ordering: .releasing)
        let start = a.events.count
        try document.reauthenticate(jwt: try server.token(documentID: "doc", userID: "alice"))
        #expect(a.events.waitForSyncEnd(document, after: start).map { $0 == nil } == true)
        if document.hasUnsyncedChanges { try syncUntilClean(a, document) }
        let remote = try server.serverAnnotations(documentID: "doc")
        let notes = Set(remote.values.compactMap { $0["note"]?.stringValue })
        for index in 0..<5 { #expect(notes.contains("before \(index)") && notes.contains("after \(index)")) }
        #expect(a.events.all.filter { if case .didFailAuthentication = $0 { return true }; return false }.count == 1)
        try a.client.shutdown()
    }

    // MARK: Rule 7: server reset (epoch changed)

    @Test func aServerResetRebasesUnsyncedEditsAndReportsIt() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let document = try downloaded(a, documentID: "doc")
        let synced = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("synced")))["id"]?.stringValue)
        #expect(try sync(a, document) == nil)
        let oldEpoch = try document.store.epoch()
        // Unsynced local work: a new record and an edit of a synced one.
        let fresh = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("offline new")))["id"]?.stringValue)
        _ = try document.updateAnnotation(json: TestServer.note("offline edit", id: synced))
        // The layer is recreated on the server (new epoch, empty): deleted, then created again
        // by the backend (a deleted layer never comes back by a client request).
        #expect(try admin("DELETE", "/api/documents/doc/layers/~") == 200)
        #expect(try admin("POST", "/api/documents/doc/layers", body: #"{"name":""}"#) == 200)
        #expect(try sync(a, document) == nil)
        let reset = try #require(a.events.wait { event -> LayerSyncError? in
            if case .didResetLayer(_, let error) = event { return error }; return nil
        })
        #expect(reset.code == .serverReset)
        #expect(reset.message.contains("2 unsynced"))
        #expect(try document.store.epoch() != oldEpoch)
        if document.hasUnsyncedChanges { try syncUntilClean(a, document) }
        let remote = try server.serverAnnotations(documentID: "doc")
        #expect(remote[fresh]?["note"] == .string("offline new"))
        #expect(remote[synced]?["note"] == .string("offline edit"))
        #expect(try localRecords(document) == remote)  // nothing else survives a reset
        try a.client.shutdown()
    }

    // MARK: Rule 8: one store per layer

    @Test func twoClientsInOneProcessShareOneLayerStore() throws {
        try server.upload(documentID: "doc")
        let storage = server.storagePath("shared")
        let a = try makeClient("a", storage: storage)
        let b = try makeClient("b", storage: storage)
        let docA = try downloaded(a, documentID: "doc")
        let docB = try b.client.document(forJWT: try server.token(documentID: "doc", userID: "alice"))
        #expect(docA.store === docB.store)
        #expect(docB.isDownloaded)
        let created = try docA.createAnnotation(json: TestServer.note("seen by both"))
        let id = try #require(try JSONValue.parse(created)["id"]?.stringValue)
        #expect(try docB.annotation(id: id) == created)
        #expect(docB.hasUnsyncedChanges)
        try a.client.shutdown()
        try b.client.shutdown()
    }

    // MARK: Rule 9: text byte-exact

    @Test func textIsStoredSyncedAndReturnedByteExact() throws {
        try server.upload(documentID: "doc")
        let texts = [
            "👩‍👩‍👧‍👦 family ZWJ", "🇩🇪🏳️‍🌈 flags", "👍🏽 skin tone", "e\u{301} decomposed vs é composed",
            "Å\u{30A}\u{323} stacked marks", "مرحبا بالعالم RTL", "עִבְרִית with points", "\u{202E}override\u{202C}",
            "\u{FEFF}BOM inside", "zero\u{200B}width", "tab\tnewline\nquote\"backslash\\", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 astral",
        ]
        let a = try makeClient("a")
        let b = try makeClient("b")
        let docA = try downloaded(a, documentID: "doc")
        var ids: [String: String] = [:]
        for text in texts {
            let stored = try docA.createAnnotation(json: TestServer.note(text))
            let id = try #require(try JSONValue.parse(stored)["id"]?.stringValue)
            ids[id] = text
            #expect(Array(try docA.annotation(id: id).utf8) == Array(stored.utf8))
        }
        #expect(try sync(a, docA) == nil)
        let docB = try downloaded(b, documentID: "doc", userID: "bob")
        let remote = try server.serverAnnotations(documentID: "doc")
        for (id, text) in ids {
            // Compare bytes: Swift's String == is canonical equivalence and would hide NFC/NFD changes.
            #expect(remote[id]?["note"]?.stringValue.map { Array($0.utf8) } == Array(text.utf8))
            let local = try JSONValue.parse(try docB.annotation(id: id))
            #expect(local["note"]?.stringValue.map { Array($0.utf8) } == Array(text.utf8))
            #expect(Array(try docB.annotation(id: id).utf8) == Array(try docA.annotation(id: id).utf8))
        }
        try a.client.shutdown()
        try b.client.shutdown()
    }

    // MARK: Everything together: three clients through a lossy proxy converge

    @Test func threeClientsThroughALossyProxyConvergeWithNothingLost() throws {
        try server.upload(documentID: "doc")
        let random = Mutex(SplitMix(seed: UInt64.random(in: 0...UInt64.max)))
        let seed = random.withLock { $0.seed }
        let lossy = Mutex(false)  // downloads go through cleanly (a dropped page fails the download, by design)
        let proxy = try FaultProxy(upstreamPort: server.port) { head in
            guard lossy.withLock({ $0 }), head.hasPrefix("POST ") || head.contains("/records?") else { return .forward }
            return random.withLock { $0.next() % 100 } < 15 ? .dropResponse : .forward
        }
        defer { proxy.stop() }
        let clients = try (0..<3).map { try makeClient("c\($0)", url: proxy.url) }
        let documents = try clients.enumerated().map { index, client in
            try downloaded(client, documentID: "doc", userID: "user\(index)")
        }
        lossy.withLock { $0 = true }
        var created: [String] = []
        var deleteAttempted: Set<String> = []
        for round in 0..<10 {
            for (index, document) in documents.enumerated() {
                for _ in 0..<8 {
                    let ids = try localRecords(document).keys.sorted()
                    let dice = random.withLock { $0.next() % 10 }
                    if dice < 4 || ids.isEmpty {
                        let stored = try document.createAnnotation(json: TestServer.note("c\(index) r\(round)"))
                        created.append(try #require(try JSONValue.parse(stored)["id"]?.stringValue))
                    } else {
                        let id = ids[Int(random.withLock { $0.next() } % UInt64(ids.count))]
                        if dice < 8 {
                            _ = try document.updateAnnotation(json: TestServer.note("c\(index) r\(round) edit", id: id))
                        } else {
                            try document.deleteAnnotation(id: id)
                            deleteAttempted.insert(id)
                        }
                    }
                }
                _ = try sync(clients[index], document)  // may fail on a dropped answer; retried later
            }
        }
        proxy.setRule { _ in .forward }
        for _ in 0..<2 {
            for (index, document) in documents.enumerated() { try syncUntilClean(clients[index], document) }
        }
        let remote = try server.serverAnnotations(documentID: "doc")
        for id in created where !deleteAttempted.contains(id) {
            #expect(remote[id] != nil, "record \(id) was lost (seed \(seed))")
        }
        for (index, document) in documents.enumerated() {
            #expect(try localRecords(document) == remote, "client \(index) diverged (seed \(seed))")
        }
        #expect(proxy.requestLines.count > 40)
        for client in clients { try client.client.shutdown() }
    }
}

/// A small seeded generator, so a failing random run can be told apart by its seed.
struct SplitMix: Sendable {
    let seed: UInt64
    private var state: UInt64
    init(seed: UInt64) {
        self.seed = seed
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension DocumentDescriptor {
    /// A record's content, or nil (no error) when absent.
    func record(idOrNil id: String) throws -> String? { try store.record(id: id) }
}
