import Foundation
import Synchronization
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

/// End-to-end tests against the real Python reference server on loopback.
/// Skipped (not failed) when `.venv/bin/layersync-server` is absent.
@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class SyncIntegrationTests {
    let server: TestServer

    init() throws {
        server = try TestServer()
    }

    /// A client against the test server with its own storage; waits for the connection sequence.
    struct Client {
        let client: SyncClient
        let events: EventRecorder
    }

    func makeClient(_ name: String, syncDelay: Double = -1, url: String? = nil) throws -> Client {
        let events = EventRecorder()
        var configuration = ClientConfiguration(serverURL: url ?? server.url, storagePath: server.storagePath(name))
        configuration.syncDelay = syncDelay
        configuration.longPollWait = 5
        configuration.connectTimeout = 2
        let client = try SyncClient(configuration: configuration, eventHandler: events.handler)
        return Client(client: client, events: events)
    }

    /// Uploads the corpus PDF and returns a downloaded descriptor for `client`.
    func downloaded(_ client: Client, documentID: String, userID: String = "alice") throws -> DocumentDescriptor {
        let document = try client.client.document(forJWT: try server.token(documentID: documentID, userID: userID))
        try document.download()
        let result = try #require(client.events.waitForDownload(document))
        if let error = result { throw error }
        return document
    }

    func sync(_ client: Client, _ document: DocumentDescriptor) throws -> LayerSyncError? {
        let start = client.events.count
        try document.sync()
        return try #require(client.events.waitForSyncEnd(document, after: start), "sync did not end")
    }

    @Test func connectionSequenceReportsServerInfo() throws {
        let a = try makeClient("a")
        let result = try #require(a.events.waitForValidation())
        let info = try result.get()
        #expect(info.protocolMin <= 1 && info.protocolMax >= 1)
        #expect(info.maxRequestBytes > 0)
        #expect(info.json.contains("\"protocol\""))
        #expect(a.client.serverInfo?.serverVersion == info.serverVersion)
        // Reported once.
        try a.client.shutdown()
        #expect(a.events.all.filter { if case .serverDidValidate = $0 { return true }; return false }.count == 1)
    }

    @Test func unreachableServerFailsValidationWithRequestFailed() throws {
        server.stop()
        let a = try makeClient("a")
        let result = try #require(a.events.waitForValidation())
        guard case .failure(let error) = result else { Issue.record("validated a stopped server"); return }
        #expect(error.code == .requestFailed)
    }

    @Test func downloadStoresThePDFAndTheServersSnapshot() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let document = try a.client.document(forJWT: try server.token(documentID: "doc", userID: "alice"))
        #expect(!document.isDownloaded && document.state == .unknown && document.pdfPath == nil)
        #expect(throws: LayerSyncError.self) { try document.listAnnotations(filterJSON: nil) }
        try document.download()
        #expect(throws: LayerSyncError.self) { try document.download() }  // one is running: invalidState
        let failure = try #require(a.events.waitForDownload(document))
        #expect(failure == nil)
        let progress = a.events.all.compactMap { event -> (Int64, Int64)? in
            if case .downloadProgress(_, let done, let total) = event { return (done, total) }
            return nil
        }
        let pdfSize = try FileManager.default.attributesOfItem(atPath: TestServer.corpusPDF)[.size] as? Int
        #expect(progress.last.map { Int($0.0) } == pdfSize)
        #expect(document.isDownloaded && document.state == .clean)
        let pdf = try #require(document.pdfPath)
        #expect(FileManager.default.contentsEqual(atPath: pdf, andPath: TestServer.corpusPDF))
        // The local snapshot equals the server's layer.
        let local = try JSONValue.parse(try document.listAnnotations(filterJSON: nil)).arrayValue ?? []
        let remote = try server.serverAnnotations(documentID: "doc")
        #expect(!remote.isEmpty)
        #expect(local.count == remote.count)
        for record in local {
            let id = try #require(record["id"]?.stringValue)
            #expect(remote[id] == TestServer.recordContent(record))
        }
        do {
            try document.download()
            Issue.record("second download accepted")
        } catch {
            #expect(error.code == .alreadyDownloaded)
        }
    }

    @Test func localEditsReachTheServerAndAnotherClient() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let document = try downloaded(a, documentID: "doc")
        let existing = try #require(try JSONValue.parse(try document.listAnnotations(filterJSON: nil)).arrayValue?.first?["id"]?.stringValue)
        let created = try JSONValue.parse(try document.createAnnotation(
            json: #"{"type":"pspdfkit/ink","pageIndex":0,"bbox":[1,2,3,4],"lines":{"points":[[[1,2]]]},"lineWidth":1,"note":"emoji 🎉 עברית"}"#))
        let createdID = try #require(created["id"]?.stringValue)
        #expect(ULID.isValid(createdID) && created["v"] == .number("2"))
        #expect(document.hasUnsyncedChanges && document.state == .dirty)
        var edited = try #require(created.objectValue)
        edited["note"] = .string("edited")
        _ = try document.updateAnnotation(json: JSONValue.object(edited).jsonText)
        try document.deleteAnnotation(id: existing)
        #expect(try sync(a, document) == nil)
        #expect(!document.hasUnsyncedChanges && document.state == .clean)
        let states = a.events.all.compactMap { event -> DocumentState? in
            if case .didChangeSyncState(_, let state) = event { return state }; return nil
        }
        #expect(states.contains(.sendingChanges) && states.last == .clean)

        let remote = try server.serverAnnotations(documentID: "doc")
        #expect(remote[createdID]?["note"] == .string("edited"))
        #expect(remote[existing] == nil)
        // A second client downloads the same state.
        let b = try makeClient("b")
        let other = try downloaded(b, documentID: "doc", userID: "bob")
        #expect(try JSONValue.parse(try other.annotation(id: createdID))["note"] == .string("edited"))
        do {
            _ = try other.annotation(id: existing)
            Issue.record("deleted record still present")
        } catch {
            #expect(error.code == .noSuchAnnotation)
        }
    }

    @Test func aListeningClientReceivesAnotherClientsChanges() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a", syncDelay: 0)  // auto sync right after the edit
        let b = try makeClient("b")
        let writer = try downloaded(a, documentID: "doc")
        let listener = try downloaded(b, documentID: "doc", userID: "bob")
        try listener.startListening()
        let created = try JSONValue.parse(try writer.createAnnotation(json: #"{"type":"pspdfkit/note","bbox":[1,2,3,4],"text":{"format":"plain","value":"hi"},"icon":"comment","pageIndex":0}"#))
        let id = try #require(created["id"]?.stringValue)
        let changes = try #require(b.events.wait { event -> RecordChanges? in
            if case .didReceiveChanges(let d, let changes) = event, d === listener, changes.created.contains(id) { return changes }
            return nil
        }, "listener never received the new record")
        #expect(changes.created == [id])
        #expect(try JSONValue.parse(try listener.annotation(id: id)) == created)
        listener.stopListening()
        try a.client.shutdown()
        try b.client.shutdown()
    }

    @Test func firstWriterWinsAndTheLoserIsToldWithBothVersions() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let b = try makeClient("b")
        let first = try downloaded(a, documentID: "doc")
        let second = try downloaded(b, documentID: "doc", userID: "bob")
        var record = try #require(try JSONValue.parse(try first.listAnnotations(filterJSON: nil)).arrayValue?.first?.objectValue)
        let id = try #require(record["id"]?.stringValue)
        record["note"] = .string("A wins")
        let winner = try first.updateAnnotation(json: JSONValue.object(record).jsonText)
        record["note"] = .string("B loses")
        let loser = try second.updateAnnotation(json: JSONValue.object(record).jsonText)
        #expect(try sync(a, first) == nil)
        #expect(try sync(b, second) == nil)
        let rejected = try #require(b.events.wait { event -> [RejectedChange]? in
            if case .didRejectChanges(let d, let list) = event, d === second { return list }
            return nil
        })
        #expect(rejected.map(\.recordID) == [id])
        #expect(rejected.first?.localJSON == (try TestServer.recordContent(loser)))
        #expect(try rejected.first?.serverJSON.map { try JSONValue.parse($0)["note"] } == .string("A wins"))
        // Both converge on the winner's version.
        #expect(try JSONValue.parse(try second.annotation(id: id)) == JSONValue.parse(winner))
        #expect(!second.hasUnsyncedChanges)
        #expect(try sync(a, first) == nil)
        #expect(try first.annotation(id: id) == second.annotation(id: id))
        #expect(try server.serverAnnotations(documentID: "doc")[id]?["note"] == .string("A wins"))
    }

    @Test func aRetriedRejectionKeepsTheNewerVersionThatArrivedMeanwhile() throws {
        // The answer rejecting B's change is lost; A writes the record again and B's long-poll
        // brings that newer version (raising B's since past it). B's retry under the same change
        // id gets the server's stored outcome of the first attempt, whose server record is A's
        // first version: B must end on A's second version, like the server.
        try server.upload(documentID: "doc")
        let proxy = try FaultProxy(upstreamPort: server.port)
        defer { proxy.stop() }
        let a = try makeClient("a")
        let b = try makeClient("b", url: proxy.url)
        let first = try downloaded(a, documentID: "doc")
        let second = try downloaded(b, documentID: "doc", userID: "bob")
        var record = try #require(try JSONValue.parse(try first.listAnnotations(filterJSON: nil)).arrayValue?.first?.objectValue)
        let id = try #require(record["id"]?.stringValue)
        record["note"] = .string("A first")
        _ = try first.updateAnnotation(json: JSONValue.object(record).jsonText)
        #expect(try sync(a, first) == nil)
        record["note"] = .string("B loses")
        _ = try second.updateAnnotation(json: JSONValue.object(record).jsonText)
        proxy.setRule { head in head.hasPrefix("POST ") && head.contains("/sync ") ? .dropResponse : .forward }
        #expect(try sync(b, second) != nil, "the answer was lost")
        proxy.setRule { _ in .forward }
        record["note"] = .string("A second")
        let newest = try first.updateAnnotation(json: JSONValue.object(record).jsonText)
        #expect(try sync(a, first) == nil)
        let revision = try #require(try first.store.knownServerRevision(id: id))
        try second.startListening()
        let deadline = Date().addingTimeInterval(20)
        while try second.store.since() < revision, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        second.stopListening()
        #expect(try second.store.knownServerRevision(id: id) == revision, "the long-poll brought A's second version")
        #expect(try sync(b, second) == nil)
        let rejected = try #require(b.events.wait { event -> [RejectedChange]? in
            if case .didRejectChanges(let d, let list) = event, d === second { return list }
            return nil
        })
        #expect(rejected.map(\.recordID) == [id])
        #expect(try rejected.first?.serverJSON.map { try JSONValue.parse($0)["note"] } == .string("A second"))
        #expect(try JSONValue.parse(try second.annotation(id: id)) == JSONValue.parse(newest))
        #expect(try server.serverAnnotations(documentID: "doc")[id]?["note"] == .string("A second"))
        #expect(try second.store.knownServerRevision(id: id) == revision)
        try a.client.shutdown()
        try b.client.shutdown()
    }

    @Test func offlineEditsStayPendingAndSyncLater() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let document = try downloaded(a, documentID: "doc")
        let port = server.port
        server.stop()
        let created = try JSONValue.parse(try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"}"#))
        let id = try #require(created["id"]?.stringValue)
        let failure = try #require(try sync(a, document))
        #expect(failure.code == .requestFailed)
        #expect(document.hasUnsyncedChanges && document.state == .dirty)
        // The host says the network is gone: no request, fail fast, still pending.
        a.client.setNetworkAvailable(false)
        #expect(try sync(a, document)?.code == .requestFailed)
        try server.start(port: port)
        let start = a.events.count
        a.client.setNetworkAvailable(true)  // resumes the failed sync by itself
        #expect(try #require(a.events.waitForSyncEnd(document, after: start)) == nil)
        #expect(!document.hasUnsyncedChanges)
        #expect(try server.serverAnnotations(documentID: "doc")[id] != nil)
    }

    @Test func authFailureIsReportedOnceAndReauthenticationResumes() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let document = try downloaded(a, documentID: "doc")
        // Replace the token with one that expired (the server rejects it).
        let expired = try server.token(documentID: "doc", userID: "alice", expiresIn: -60)
        try document.reauthenticate(jwt: expired)
        let reauthFailure = try #require(a.events.wait { event -> LayerSyncError? in
            if case .didFailReauthentication(_, let error) = event { return error }; return nil
        })
        #expect(reauthFailure.code == .accessDenied)
        // A different user is refused offline.
        let mallory = try server.token(documentID: "doc", userID: "mallory")
        let otherDocument = try server.token(documentID: "other", userID: "alice")
        do {
            try document.reauthenticate(jwt: mallory)
            Issue.record("accepted another user's token")
        } catch {
            #expect(error.code == .userIDMismatch)
        }
        do {
            try document.reauthenticate(jwt: otherDocument)
            Issue.record("accepted another document's token")
        } catch {
            #expect(error.code == .invalidJWT)
        }
        let fresh = try server.token(documentID: "doc", userID: "alice")
        try document.reauthenticate(jwt: fresh)
        let accepted = try #require(a.events.wait { event -> String? in
            if case .didFinishReauthentication(_, let jwt) = event { return jwt }; return nil
        })
        #expect(accepted == fresh)
    }

    @Test func anExpiredTokenFailsAuthenticationOnceAndRequestsAToken() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let document = try a.client.document(forJWT: try server.token(documentID: "doc", userID: "alice", expiresIn: -60))
        try document.download()
        let failure = try #require(a.events.waitForDownload(document))
        #expect(failure?.code == .accessDenied)
        #expect(a.events.wait { if case .requestToken = $0 { return true }; return nil } == true)
        let start = a.events.count
        try document.download()  // the same rejected token again: no second auth report
        #expect(a.events.wait(after: start) { event -> Bool? in
            if case .didFailDownload = event { return true }; return nil
        } == true)
        try a.client.shutdown()
        let authFailures = a.events.all.filter { if case .didFailAuthentication = $0 { return true }; return false }
        #expect(authFailures.count == 1)
    }

    @Test func aChangeOverTheServersLimitIsRejectedAloneWithoutBlockingTheQueue() throws {
        server.stop()
        let limited = try TestServer(extraArguments: ["--max-request-bytes", "4096"])
        try limited.upload(documentID: "doc")
        let events = EventRecorder()
        var configuration = ClientConfiguration(serverURL: limited.url, storagePath: limited.storagePath("a"))
        configuration.syncDelay = -1
        let client = try SyncClient(configuration: configuration, eventHandler: events.handler)
        #expect(try #require(events.waitForValidation()).map(\.maxRequestBytes).get() == 4096)
        let document = try client.document(forJWT: try limited.token(documentID: "doc"))
        try document.download()
        #expect(try #require(events.waitForDownload(document)) == nil)
        let big = try JSONValue.parse(try document.createAnnotation(
            json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"icon":"comment","text":{"format":"plain","value":""# + String(repeating: "x", count: 10_000) + #""}}"#))
        let small = try JSONValue.parse(try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"}"#))
        let start = events.count
        try document.sync()
        #expect(try #require(events.waitForSyncEnd(document, after: start)) == nil)
        let rejected = try #require(events.wait(after: start) { event -> [RejectedChange]? in
            if case .didRejectChanges(_, let list) = event { return list }; return nil
        })
        #expect(rejected.map(\.recordID) == [big["id"]?.stringValue])
        #expect(rejected.first?.reason == "payload_too_large")
        #expect(!document.hasUnsyncedChanges)
        let remote = try limited.serverAnnotations(documentID: "doc")
        #expect(remote[small["id"]!.stringValue!] != nil)
        #expect(remote[big["id"]!.stringValue!] == nil)
        try client.shutdown()
    }

    @Test func malformedJWTIsRejected() throws {
        let a = try makeClient("a")
        for token in ["", "abc", "a.b.c", makeJWT(#"{"layer":"x"}"#)] {
            do {
                _ = try a.client.document(forJWT: token)
                Issue.record("accepted \(token)")
            } catch {
                #expect(error.code == .invalidJWT)
            }
        }
    }

    @Test func recordCallsValidateJSON() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let document = try downloaded(a, documentID: "doc")
        let cases: [(String, ErrorCode)] = [
            ("not json", .invalidArgument), ("[1]", .invalidJSONStructure), (#"{"pageIndex":0}"#, .invalidJSONStructure),
            (#"{"type":"pspdfkit/note","id":5}"#, .invalidJSONStructure),
        ]
        for (json, code) in cases {
            do {
                _ = try document.createAnnotation(json: json)
                Issue.record("accepted \(json)")
            } catch {
                #expect(error.code == code)
            }
        }
        let stored = try document.createAnnotation(json: #"{"id":"my-id","type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"}"#)
        #expect(try TestServer.recordContent(stored) == #"{"id":"my-id","type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment","v":2}"#)
        do {
            _ = try document.createAnnotation(json: #"{"id":"my-id","type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"}"#)
            Issue.record("duplicate id accepted")
        } catch {
            #expect(error.code == .invalidArgument)
        }
        do {
            _ = try document.updateAnnotation(json: #"{"id":"nope","type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"}"#)
            Issue.record("update of unknown id accepted")
        } catch {
            #expect(error.code == .noSuchAnnotation)
        }
    }

    @Test func shutdownFromTheEventHandlerIsRefusedAndAfterShutdownNoEventsArrive() throws {
        let box = Mutex<SyncClient?>(nil)
        let fromHandler = Mutex<ErrorCode?>(nil)
        let events = EventRecorder()
        let forward = events.handler
        let client = try SyncClient(configuration: ClientConfiguration(serverURL: server.url, storagePath: server.storagePath("a"))) { event in
            if case .serverDidValidate = event, let client = box.withLock({ $0 }) {
                #expect(client.isOnEventQueue)
                do throws(LayerSyncError) {
                    try client.shutdown()
                } catch {
                    fromHandler.withLock { $0 = error.code }
                }
            }
            forward(event)
        }
        box.withLock { $0 = client }
        // The validation may have been delivered before the box was filled; then the handler skipped the call.
        _ = try #require(events.waitForValidation())
        if fromHandler.withLock({ $0 }) == nil {
            #expect(!client.isOnEventQueue)
        } else {
            #expect(fromHandler.withLock { $0 } == .invalidState)
        }
        try server.upload(documentID: "doc")
        let document = try client.document(forJWT: try server.token(documentID: "doc"))
        try document.download()
        try client.shutdown()
        let count = events.count
        try client.shutdown()  // idempotent
        #expect(throws: LayerSyncError.self) { try document.sync() }
        client.setNetworkAvailable(false)
        client.setNetworkAvailable(true)
        #expect(events.count == count)
    }
}
