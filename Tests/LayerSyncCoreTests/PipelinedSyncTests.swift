import Foundation
import Synchronization
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

/// A sync cycle of many batches pipelines them (the next batch goes out while the previous
/// answer is applied). These tests force many small batches with a small `max_request_bytes`
/// and check that nothing is lost, duplicated or diverges — with lost answers, injected 413s
/// and concurrent conflicting edits.
@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class PipelinedSyncTests {
    let server: TestServer

    init() throws {
        // ~20 changes of the notes below per request: a few hundred changes take many batches.
        server = try TestServer(extraArguments: ["--max-request-bytes", "6000"])
    }

    typealias Client = TestClient

    func makeClient(_ name: String, url: String? = nil) throws -> Client {
        try server.makeClient(name, url: url)
    }

    func downloaded(_ client: Client, userID: String) throws -> DocumentDescriptor {
        let document = try client.client.document(forJWT: try server.token(documentID: "doc", userID: userID))
        try document.download()
        if let error = try #require(client.events.waitForDownload(document)) { throw error }
        return document
    }

    func sync(_ client: Client, _ document: DocumentDescriptor) throws -> LayerSyncError? {
        let start = client.events.count
        try document.sync()
        return try #require(client.events.waitForSyncEnd(document, after: start, timeout: 120), "sync did not end")
    }

    func syncUntilClean(_ client: Client, _ document: DocumentDescriptor, attempts: Int = 30) throws {
        for _ in 0..<attempts {
            if try sync(client, document) == nil, !document.hasUnsyncedChanges { return }
        }
        Issue.record("did not reach a clean sync")
    }

    func create(_ document: DocumentDescriptor, _ count: Int, _ label: String) throws -> [String] {
        try (0..<count).map { index in
            try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("\(label) \(index)")))["id"]?.stringValue)
        }
    }

    @Test func manyBatchesArriveOnceEach() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let document = try downloaded(a, userID: "alice")
        let ids = try create(document, 300, "a")
        let start = a.events.count
        #expect(try sync(a, document) == nil)
        #expect(!document.hasUnsyncedChanges)
        let remote = try server.serverAnnotations(documentID: "doc")
        for id in ids { #expect(remote[id] != nil) }
        #expect(try localRecords(document) == remote)
        // Nothing came back as a server change, and nothing was rejected.
        let received = a.events.all[start...].contains { if case .didReceiveChanges = $0 { return true } else { return false } }
        let rejected = a.events.all[start...].contains { if case .didRejectChanges = $0 { return true } else { return false } }
        #expect(!received && !rejected)
        #expect(document.lastSyncTime > 0)
        try a.client.shutdown()
    }

    @Test func lostAnswersAnd413sWhilePipeliningLoseNothing() throws {
        try server.upload(documentID: "doc")
        let random = Mutex(SplitMix(seed: UInt64.random(in: 0...UInt64.max)))
        let seed = random.withLock { $0.seed }
        let proxy = try FaultProxy(upstreamPort: server.port) { head in
            guard head.hasPrefix("POST ") else { return .forward }
            // A 413 for a request of one change rejects that change (by design), so only
            // requests of several changes get one.
            let length = FaultProxy.contentLength(head) ?? 0
            switch random.withLock({ $0.next() % 100 }) {
            case 0..<12: return .dropResponse
            case 12..<20 where length > 1500: return .reply(413)
            default: return .forward
            }
        }
        defer { proxy.stop() }
        let a = try makeClient("a", url: proxy.url)
        let b = try makeClient("b", url: proxy.url)
        let documentA = try downloaded(a, userID: "alice")
        let documentB = try downloaded(b, userID: "bob")
        var expected = Set(try create(documentA, 250, "a"))
        expected.formUnion(try create(documentB, 120, "b"))
        try syncUntilClean(a, documentA)
        try syncUntilClean(b, documentB)
        try syncUntilClean(a, documentA)
        // Conflicting edits of the same records on both sides, then deletes on one side.
        let shared = try localRecords(documentA).keys.sorted()
        for id in shared.prefix(80) { _ = try documentA.updateAnnotation(json: TestServer.note("a edit", id: id)) }
        for id in shared.dropFirst(40).prefix(80) { _ = try documentB.updateAnnotation(json: TestServer.note("b edit", id: id)) }
        for id in shared.suffix(30) {
            try documentB.deleteAnnotation(id: id)
            expected.remove(id)
        }
        expected.formUnion(try create(documentA, 60, "a2"))
        try syncUntilClean(b, documentB)
        try syncUntilClean(a, documentA)
        proxy.setRule { _ in .forward }
        try syncUntilClean(b, documentB)
        try syncUntilClean(a, documentA)
        let remote = try server.serverAnnotations(documentID: "doc")
        let missing = expected.subtracting(remote.keys), extra = Set(remote.keys).subtracting(expected)
        let dropped = (a.events.all + b.events.all).flatMap { event -> [String] in
            if case .didRejectChanges(_, let list) = event { return list.filter { $0.reason == "payload_too_large" }.map(\.recordID) }
            return []
        }
        #expect(missing.isEmpty && extra.isEmpty, "missing \(missing) extra \(extra) dropped as too large \(dropped) seed \(seed)")
        #expect(try localRecords(documentA) == remote, "client a diverged (seed \(seed))")
        #expect(try localRecords(documentB) == remote, "client b diverged (seed \(seed))")
        // Every record edited by both sides ended with one of the two edits.
        for id in shared.dropFirst(40).prefix(40) where remote[id] != nil {
            let note = remote[id]?["note"]?.stringValue
            #expect(note == "a edit" || note == "b edit", "seed \(seed)")
        }
        try a.client.shutdown()
        try b.client.shutdown()
    }

    @Test func aListenerSeesEveryPipelinedChange() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a")
        let b = try makeClient("b")
        let documentA = try downloaded(a, userID: "alice")
        let documentB = try downloaded(b, userID: "bob")
        try documentB.startListening()
        let ids = Set(try create(documentA, 200, "a"))
        #expect(try sync(a, documentA) == nil)
        let deadline = Date().addingTimeInterval(30)
        var seen: Set<String> = []
        while Date() < deadline, !ids.isSubset(of: seen) {
            seen = Set(b.events.all.flatMap { event -> [String] in
                if case .didReceiveChanges(_, let changes) = event { return changes.created }
                return []
            })
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(ids.isSubset(of: seen))
        documentB.stopListening()
        #expect(try localRecords(documentB) == (try localRecords(documentA)))
        try a.client.shutdown()
        try b.client.shutdown()
    }
}
