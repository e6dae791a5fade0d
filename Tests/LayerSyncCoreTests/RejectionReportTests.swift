import Foundation
import Synchronization
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel
@testable import LayerSyncStore
@testable import LayerSyncTransport

/// Conflict reports that survive a crash (docs/durability.md "Conflict reports", docs/rules.md
/// rule 3): the store side. The kill -9 between commit and delivery is
/// bindings/python/tests/test_rejection_reports.py (a host process killed inside its callback).
@Suite struct RejectionReportStoreTests {
    /// A downloaded store (epoch `e1`, revision 1) with record `a` = `{"n":0}` edited locally
    /// to `{"n":"mine"}`, and that change sent (frozen).
    private func storeWithSentEdit() throws -> (LayerStore, [PendingChange]) {
        let store = try LayerStore.open(directory: temporaryDirectory("reports"))
        _ = try store.applySnapshot([ServerRecord(id: "a", revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#))],
                                    epoch: "e1", revision: 1)
        try store.updateRecord(id: "a", content: #"{"n":"mine"}"#)
        return (store, try store.nextBatch(maxBytes: 100_000).batch)
    }

    /// The sync answer rejecting `sent` in favour of `{"n":"theirs"}` at revision 2.
    private func conflictAnswer(_ sent: [PendingChange]) throws -> SyncAnswer {
        let server = ServerRecord(id: "a", revision: 2, deleted: false, content: try JSONValue.parse(#"{"n":"theirs"}"#))
        return SyncAnswer(epoch: "e1", revision: 2, epochChanged: false, accepted: [],
                          rejected: sent.map { .init(changeID: $0.changeID, recordID: $0.recordID, reason: "conflict", serverRecord: server) },
                          changes: [], hasMore: false, nextSince: 2)
    }

    @Test func aRejectionIsStoredWithBothVersionsUnderAStableID() throws {
        let (store, sent) = try storeWithSentEdit()
        let round = try store.applySyncAnswer(try conflictAnswer(sent), sent: sent, since: 2, lastSyncTime: nil, next: nil)
        let reported = try #require(round.outcome.rejections.first)
        #expect(reported.reportID.count == 26)
        #expect(reported.changeID == sent.first?.changeID)
        let stored = try store.rejectionReports()
        #expect(stored.count == 1)
        #expect(stored.first?.report == reported)
        #expect(stored.first?.delivered == false)
        #expect(stored.first?.report.localJSON == #"{"n":"mine"}"#)
        #expect(stored.first?.report.serverJSON == #"{"n":"theirs"}"#)
        #expect(try store.record(id: "a") == #"{"n":"theirs"}"#)
        // The JSON of the event and of the list carries the ids.
        let json = try JSONValue.parse(RejectedChange.jsonText([reported])).arrayValue?.first
        #expect(json?["report_id"]?.stringValue == reported.reportID)
        #expect(json?["change_id"]?.stringValue == sent.first?.changeID)
        #expect(json?["id"]?.stringValue == "a")
    }

    /// The report commits in the transaction that adopts the server version: when storing the
    /// report fails, nothing of the answer is applied (the change stays queued, to be resent).
    @Test func theReportAndTheAdoptionCommitTogetherOrNotAtAll() throws {
        let (store, sent) = try storeWithSentEdit()
        try store.withDatabase { db throws(LayerSyncError) in
            try db.execute("CREATE TEMP TRIGGER no_reports BEFORE INSERT ON rejected_changes BEGIN SELECT RAISE(ABORT, 'disk full'); END;")
        }
        #expect(throws: LayerSyncError.self) {
            _ = try store.applySyncAnswer(try conflictAnswer(sent), sent: sent, since: 2, lastSyncTime: nil, next: nil)
        }
        #expect(try store.record(id: "a") == #"{"n":"mine"}"#)
        #expect(try store.pendingCount() == 1)
        #expect(try store.since() == 1)
        #expect(try store.rejectionReports().isEmpty)
    }

    @Test func everyKindOfRejectionIsStored() throws {
        let store = try LayerStore.open(directory: temporaryDirectory("reports"))
        _ = try store.applySnapshot(try ["a", "b"].map { ServerRecord(id: $0, revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#)) },
                                    epoch: "e1", revision: 1)
        try store.updateRecord(id: "a", content: #"{"n":"unsent"}"#)
        let changeID = try #require(try store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT change_id FROM pending_changes WHERE record_id = 'a'").first?.first?.text
        })
        // superseded: a server version arrives before the local change was sent.
        _ = try store.applyServerRecords([ServerRecord(id: "a", revision: 2, deleted: false, content: try JSONValue.parse(#"{"n":2}"#))], since: 2)
        // payload_too_large: dropped alone.
        try store.updateRecord(id: "b", content: #"{"n":"large"}"#)
        let oversized = try store.nextBatch(maxBytes: 10)
        let dropped = try #require(oversized.oversized.first)
        _ = try store.dropChange(dropped, reason: "payload_too_large")
        // attachment_missing.
        try store.addAttachment(id: String(repeating: "0", count: 64), contentType: "image/png")
        _ = try store.dropPendingAttachment(id: String(repeating: "0", count: 64))
        let stored = try store.rejectionReports().map(\.report)
        #expect(stored.map(\.reason) == ["superseded", "payload_too_large", "attachment_missing"])
        #expect(stored.map(\.changeID) == [changeID, dropped.changeID, nil])
        #expect(stored.map(\.localJSON) == [#"{"n":"unsent"}"#, #"{"n":"large"}"#, nil])
        #expect(Set(stored.map(\.reportID)).count == 3)
    }

    @Test func deliveredReportsStayListedUntilAcknowledgedAndOnlyTheNewestAreKept() throws {
        let (store, sent) = try storeWithSentEdit()
        let round = try store.applySyncAnswer(try conflictAnswer(sent), sent: sent, since: 2, lastSyncTime: nil, next: nil)
        let id = try #require(round.outcome.rejections.first?.reportID)
        try store.markRejectionsDelivered([id])
        #expect(try store.rejectionReports().map(\.delivered) == [true])
        #expect(try store.rejectionReports(undeliveredOnly: true).isEmpty)
        #expect(try store.acknowledgeRejections([id, "01JUNKNOWNUNKNOWNUNKNOWN00"]) == 1)
        #expect(try store.rejectionReports().isEmpty)
        #expect(try store.acknowledgeRejections([id]) == 0)

        // Pruning: an undelivered report is kept however old; of the delivered ones, the newest
        // `maximumDeliveredRejections`.
        let limit = LayerStore.maximumDeliveredRejections
        try store.withDatabase { db throws(LayerSyncError) in
            try db.execute("""
                INSERT INTO rejected_changes(id, record_id, reason) VALUES ('old-undelivered', 'a', 'conflict');
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(limit + 5))
                INSERT INTO rejected_changes(id, record_id, reason) SELECT 'r' || i, 'a', 'conflict' FROM n;
                """)
        }
        try store.markRejectionsDelivered((1...(limit + 5)).map { "r\($0)" })
        let left = try store.rejectionReports()
        #expect(left.count == limit + 1)
        #expect(left.first?.report.reportID == "old-undelivered" && left.first?.delivered == false)
        #expect(left.dropFirst().first?.report.reportID == "r6")
        #expect(left.last?.report.reportID == "r\(limit + 5)")
    }

    /// A store written by schema version 5 (no `rejected_changes`) gains the table and keeps
    /// everything else.
    @Test func aVersion5StoreGainsTheReportTable() throws {
        let directory = temporaryDirectory("v5")
        do {
            let store = try LayerStore.open(directory: directory)
            _ = try store.applySnapshot([ServerRecord(id: "a", revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#))],
                                        epoch: "e1", revision: 1)
            try store.updateRecord(id: "a", content: #"{"n":"mine"}"#)
            store.close()
        }
        do {
            // Exactly what schema 5 had: version 6 only added the table and its index.
            let db = try SQLiteDatabase(path: directory + "/layer.sqlite")
            try db.execute("DROP TABLE rejected_changes; PRAGMA user_version = 5;")
        }
        let store = try LayerStore.open(directory: directory)
        #expect(try store.withDatabase { db throws(LayerSyncError) in try db.query("PRAGMA user_version").first?.first?.integer } == LayerStore.schemaVersion)
        #expect(try store.record(id: "a") == #"{"n":"mine"}"#)
        #expect(try store.pendingCount() == 1)
        #expect(try store.rejectionReports().isEmpty)
        let sent = try store.nextBatch(maxBytes: 100_000).batch
        let round = try store.applySyncAnswer(try conflictAnswer(sent), sent: sent, since: 2, lastSyncTime: nil, next: nil)
        #expect(try store.rejectionReports().map(\.report) == round.outcome.rejections)
        #expect(round.outcome.rejections.count == 1)
    }
}

/// Conflict reports end to end against the real server: delivery after a failed paged cycle,
/// again at the next open, and the list/acknowledge pair.
@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class RejectionReportTests {
    let server: TestServer

    init() throws {
        // Small pages, so that a sync answer is paged (`has_more`) with few records.
        let directory = NSTemporaryDirectory() + "layersync-pages-" + UUID().uuidString + ".toml"
        try "max_page_records = 2\n".write(toFile: directory, atomically: true, encoding: .utf8)
        server = try TestServer(extraArguments: ["--config", directory])
    }

    /// Waits until every stored report of `document` is marked delivered (the handler returned).
    func waitUntilDelivered(_ document: DocumentDescriptor) throws -> [(report: RejectedChange, delivered: Bool)] {
        let deadline = Date().addingTimeInterval(20)
        while true {
            let reports = try document.rejectedChanges()
            if reports.allSatisfy(\.delivered) || Date() > deadline { return reports }
            usleep(20_000)
        }
    }

    /// A conflict set up for client `b`: record `id` edited by both, `a`'s edit (and three more
    /// creates, so that `b`'s sync answer is paged) on the server first.
    func conflict(documentID: String, b: TestClient, bURL: String? = nil) throws -> (DocumentDescriptor, String) {
        try server.upload(documentID: documentID)
        let a = try server.makeClient("a-\(documentID)")
        let docA = try a.downloaded(jwt: try server.token(documentID: documentID, userID: "alice"))
        let docB = try b.downloaded(jwt: try server.token(documentID: documentID, userID: "bob"))
        let id = try #require(try JSONValue.parse(try docA.listAnnotations(filterJSON: nil)).arrayValue?.first?["id"]?.stringValue)
        _ = try docB.updateAnnotation(json: TestServer.note("from b", id: id))
        _ = try docA.updateAnnotation(json: TestServer.note("from a", id: id))
        for index in 0..<3 { _ = try docA.createAnnotation(json: TestServer.note("more \(index)")) }
        #expect(try a.sync(docA) == nil)
        try a.client.shutdown()
        return (docB, id)
    }

    @Test func aReportIsDeliveredListedUnderItsIDAndGoneOnceAcknowledged() throws {
        let b = try server.makeClient("b-listed")
        let (docB, id) = try conflict(documentID: "listed", b: b)
        #expect(try b.sync(docB) == nil)
        let delivered = b.rejections()
        #expect(delivered.map(\.recordID) == [id])
        let reportID = try #require(delivered.first?.reportID)
        let listed = try waitUntilDelivered(docB)
        #expect(listed.map(\.report.reportID) == [reportID])
        #expect(listed.first?.delivered == true)
        let json = try JSONValue.parse(try docB.rejectedChangesJSON()).arrayValue?.first
        #expect(json?["report_id"]?.stringValue == reportID && json?["delivered"] == .bool(true))
        #expect(json?["local"]?["note"] == .string("from b") && json?["server"]?["note"] == .string("from a"))
        // A delivered report is not delivered again, neither by the next cycle nor at the next open.
        let start = b.events.count
        #expect(try b.sync(docB) == nil)
        #expect(b.rejections(after: start).isEmpty)
        #expect(throws: LayerSyncError.self) { try docB.acknowledgeRejectedChanges(idsJSON: #"{"id":1}"#) }
        #expect(throws: LayerSyncError.self) { try docB.acknowledgeRejectedChanges(ids: [""]) }
        #expect(try docB.acknowledgeRejectedChanges(idsJSON: "[\"\(reportID)\"]") == 1)
        #expect(try docB.rejectedChanges().isEmpty)
        #expect(try docB.rejectedChangesJSON() == "[]")
        try b.client.shutdown()
    }

    /// A report the handler never returned from (the process died) is delivered again, with
    /// the same id, when the layer is opened again.
    @Test func anUndeliveredReportIsDeliveredAgainWhenTheLayerIsOpenedAgain() throws {
        let storage = server.storagePath("b-reopen")
        let b = try server.makeClient("b-reopen", storage: storage)
        let (docB, id) = try conflict(documentID: "reopen", b: b)
        #expect(try b.sync(docB) == nil)
        let reportID = try #require(b.rejections().first?.reportID)
        _ = try waitUntilDelivered(docB)
        try b.client.shutdown()
        // As if the process had died inside the callback: the delivered mark never committed.
        try docB.store.withDatabase { db throws(LayerSyncError) in try db.query("UPDATE rejected_changes SET delivered = 0") }

        let again = try server.makeClient("b-reopen-2", storage: storage)
        let reopened = try again.client.document(forJWT: try server.token(documentID: "reopen", userID: "bob"))
        let redelivered = again.events.wait { event -> [RejectedChange]? in
            if case .didRejectChanges(let d, let list) = event, d === reopened { return list }
            return nil
        }
        #expect(redelivered?.map(\.reportID) == [reportID])
        #expect(redelivered?.map(\.recordID) == [id])
        #expect(try waitUntilDelivered(reopened).map(\.delivered) == [true])
        try again.client.shutdown()
    }

    /// The sync answer that rejects the change is paged (`has_more`) and the continuation page
    /// fails: the rejection is committed with the first page, so it is reported all the same
    /// (before `didFailSync`), and later cycles do not report it twice.
    @Test func aRejectionInAPagedAnswerIsReportedWhenTheContinuationFails() throws {
        let failPages = Atomic<Bool>(false)
        let proxy = try FaultProxy(upstreamPort: server.port) { head in
            guard failPages.load(ordering: .acquiring), head.hasPrefix("GET "), head.contains("/records?since=") else { return .forward }
            return .reply(503)
        }
        defer { proxy.stop() }
        let b = try server.makeClient("b-paged", url: proxy.url)
        let (docB, id) = try conflict(documentID: "paged", b: b)
        failPages.store(true, ordering: .releasing)
        let start = b.events.count
        let failure = try b.sync(docB)
        #expect(failure != nil, "the continuation page did not fail")
        #expect(proxy.requestLines.contains { $0.hasPrefix("GET ") && $0.contains("/records?since=") })
        let reported = b.rejections(after: start)
        #expect(reported.map(\.recordID) == [id])
        #expect(try docB.annotation(id: id).contains("from a"))
        failPages.store(false, ordering: .releasing)
        let later = b.events.count
        #expect(try b.sync(docB) == nil)
        #expect(b.rejections(after: later).isEmpty)
        #expect(try waitUntilDelivered(docB).map(\.report.reportID) == reported.map(\.reportID))
        try b.client.shutdown()
    }
}
