import Foundation
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel
@testable import LayerSyncStore

func temporaryDirectory(_ name: String = "store") -> String {
    NSTemporaryDirectory() + "layersync-\(name)-" + UUID().uuidString
}

@Suite struct LayerStoreTests {
    private func pendingRows(_ store: LayerStore) throws -> [[String?]] {
        try store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT op, content, attempted, record_id FROM pending_changes ORDER BY seq").map { row in
                [row[0].text, row[1].text, row[2].integer.map(String.init), row[3].text]
            }
        }
    }

    /// A record content of over 5000 bytes: past every size limit these tests set.
    private static let large = #"{"n":""# + String(repeating: "x", count: 5000) + #""}"#

    /// A new store holding a downloaded snapshot (epoch `e1`, revision 1) in which each of `ids`
    /// is `{"n":0}` at server revision 1.
    private func downloadedStore(serverRecords ids: String...) throws -> LayerStore {
        let store = try LayerStore.open(directory: temporaryDirectory())
        _ = try store.applySnapshot(try ids.map { ServerRecord(id: $0, revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#)) },
                                    epoch: "e1", revision: 1)
        return store
    }

    @Test func aWriteIsReadableAfterReopeningTheFile() throws {
        let directory = temporaryDirectory()
        do {
            let store = try LayerStore.open(directory: directory)
            try store.createRecord(id: "r1", content: #"{"id":"r1","type":"pspdfkit/note","text":"héllo 👋"}"#)
        }  // the only reference is gone: the store closes and releases its lock
        let reopened = try LayerStore.open(directory: directory)
        #expect(try reopened.record(id: "r1") == #"{"id":"r1","type":"pspdfkit/note","text":"héllo 👋"}"#)
        #expect(try reopened.pendingCount() == 1)
        // Files are private.
        let attributes = try FileManager.default.attributesOfItem(atPath: directory + "/layer.sqlite")
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let directoryAttributes = try FileManager.default.attributesOfItem(atPath: directory)
        #expect((directoryAttributes[.posixPermissions] as? Int) == 0o700)
        #expect(try reopened.withDatabase { db throws(LayerSyncError) in try db.query("PRAGMA user_version").first?.first?.integer } == LayerStore.schemaVersion)
    }

    /// The replies of a record (a delete takes them, a thread lists them, every record handed
    /// out under collaboration permissions reads them) come through index `records_root`, not a
    /// scan of every record; a record whose content is not JSON is no one's reply.
    @Test func repliesAreLookedUpThroughTheRootIndex() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        try store.createRecord(id: "r", content: #"{"id":"r","type":"pspdfkit/note"}"#)
        try store.createRecord(id: "c1", content: #"{"id":"c1","type":"pspdfkit/comment","rootId":"r"}"#)
        try store.createRecord(id: "o", content: #"{"id":"o","type":"pspdfkit/comment","rootId":"other"}"#)
        try store.createRecord(id: "c2", content: #"{"id":"c2","type":"pspdfkit/comment","rootId":"r"}"#)
        try store.createRecord(id: "bad", content: #"{"id":"bad"}"#)
        try store.withDatabase { db throws(LayerSyncError) in
            _ = try db.query("UPDATE records SET content = 'not JSON \"rootId\":\"r\"' WHERE id = 'bad'")
        }
        #expect(try store.replies(rootID: "r").map(\.id) == ["c1", "c2"])
        #expect(try store.replies(rootIDs: ["r", "other", "none"]).mapValues { $0.map(\.id) } == ["r": ["c1", "c2"], "other": ["o"]])
        #expect(try store.storedComments(rootID: "r").map(\.id).sorted() == ["c1", "c2"])
        let plan = try store.withDatabase { db throws(LayerSyncError) in
            try db.query("EXPLAIN QUERY PLAN SELECT id FROM records WHERE content IS NOT NULL AND \(LayerStore.rootIDExpression) = ?",
                         [.text("r")]).compactMap { $0.last?.text }
        }
        #expect(plan.contains { $0.contains("USING INDEX records_root") }, "plan: \(plan)")
        #expect(try store.deleteRecord(id: "r") == ["r", "c1", "c2"])
        #expect(try store.replies(rootID: "r").isEmpty)
    }

    @Test func sameDirectorySharesOneStoreInAProcess() throws {
        let directory = temporaryDirectory()
        let a = try LayerStore.open(directory: directory)
        let b = try LayerStore.open(directory: directory)
        #expect(a === b)
    }

    @Test func anotherProcessHoldingTheLockGivesStorageLocked() throws {
        let directory = temporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let holder = Process()
        // One process that takes the lock, signals readiness, and sleeps (killed by terminate()).
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        let ready = directory + "/ready"
        holder.arguments = ["-c", "import fcntl,sys,time; f=open(sys.argv[1],'w'); fcntl.flock(f, fcntl.LOCK_EX); open(sys.argv[2],'w').close(); time.sleep(30)",
                            directory + "/lock", ready]
        try holder.run()
        defer { kill(holder.processIdentifier, SIGKILL); holder.waitUntilExit() }
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: ready), Date() < deadline { usleep(20_000) }
        do {
            _ = try LayerStore.open(directory: directory)
            Issue.record("opened a store locked by another process")
        } catch {
            #expect(error.code == .storageLocked)
        }
    }

    @Test func coalescesEditsIntoTheUnsentChange() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        try store.createRecord(id: "a", content: #"{"v":1}"#)
        try store.updateRecord(id: "a", content: #"{"v":2}"#)
        #expect(try pendingRows(store) == [["create", #"{"v":2}"#, "0", "a"]])
        try store.deleteRecord(id: "a")
        #expect(try pendingRows(store).isEmpty)          // create+delete of a never-sent create: nothing left
        #expect(try store.record(id: "a") == nil)
        try store.createRecord(id: "a", content: "{}")   // the id is free again
        #expect(throws: LayerSyncError.self) { try store.createRecord(id: "a", content: "{}") }
        #expect(throws: LayerSyncError.self) { try store.updateRecord(id: "missing", content: "{}") }
    }

    @Test func sentChangesAreFrozenAndRetriedByteIdentical() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        try store.createRecord(id: "a", content: #"{"type":"t","n":1}"#)
        let first = try store.nextBatch(maxBytes: 10_000).batch
        #expect(first.count == 1)
        try store.updateRecord(id: "a", content: #"{"type":"t","n":2}"#)  // behind a frozen change: its own row
        try store.updateRecord(id: "a", content: #"{"type":"t","n":3}"#)  // coalesced into that row
        #expect(try pendingRows(store).map { $0[0] } == ["create", "update"])
        let retry = try store.nextBatch(maxBytes: 10_000).batch
        #expect(retry == first)  // same change id, same bytes; the update waits for the create's answer
        // Accepting the create lets the update go out with the create's revision as base.
        _ = try store.applyAnswers(accepted: [.init(changeID: first[0].changeID, recordID: "a", revision: 7)], rejected: [], sent: first)
        let next = try store.nextBatch(maxBytes: 10_000).batch
        #expect(next.count == 1)
        let payload = try JSONValue.parse(next[0].payload)
        #expect(payload["op"] == .string("update"))
        #expect(payload["base_revision"] == .number("7"))
        #expect(payload["content"]?["n"] == .number("3"))
    }

    @Test func aSnapshotIsStagedPageByPageAndAppliedAllOrNothing() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        try store.createRecord(id: "mine", content: #"{"note":"local draft"}"#)
        try store.beginSnapshot()
        try store.stageSnapshotPage([ServerRecord(id: "a", revision: 1, deleted: false, content: try JSONValue.parse(#"{"note":"alpha"}"#)),
                                     ServerRecord(id: "b", revision: 2, deleted: false, content: try JSONValue.parse(#"{"note":"beta"}"#))])
        try store.stageSnapshotPage([ServerRecord(id: "a", revision: 3, deleted: true, content: nil)])
        // Interrupted here: nothing is visible and the layer is not downloaded.
        #expect(try !store.isDownloaded())
        #expect(try store.record(id: "b") == nil)
        // A new attempt starts over.
        try store.beginSnapshot()
        try store.stageSnapshotPage([ServerRecord(id: "b", revision: 2, deleted: false, content: try JSONValue.parse(#"{"note":"beta"}"#)),
                                     ServerRecord(id: "c", revision: 4, deleted: false, content: try JSONValue.parse(#"{"note":"gamma"}"#))])
        try store.stageSnapshotPage([ServerRecord(id: "c", revision: 5, deleted: true, content: nil)])
        let outcome = try store.finishSnapshot(epoch: "e1", revision: 5, reportChanges: true)
        #expect(outcome.changes.created == ["b"] && outcome.rebased == ["mine"])
        #expect(try store.isDownloaded() && store.since() == 5 && store.epoch() == "e1")
        #expect(try store.record(id: "a") == nil && store.record(id: "c") == nil)
        #expect(try store.record(id: "b") == #"{"note":"beta"}"#)
        #expect(try store.record(id: "mine") == #"{"note":"local draft"}"#)
        #expect(try store.searchRecords(query: "beta", limit: 10) == [#"{"note":"beta"}"#])
        #expect(try store.searchRecords(query: "draft", limit: 10) == [#"{"note":"local draft"}"#])
        #expect(try store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT count(*) FROM snapshot_staging").first?.first?.integer } == 0)
    }

    @Test func theCachedPendingCountFollowsEveryWrite() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        func counted() throws -> Int {
            try store.withDatabase { db throws(LayerSyncError) in
                Int(try db.query("SELECT (SELECT count(*) FROM pending_changes) + (SELECT count(*) FROM attachments WHERE uploaded = 0)")
                    .first?.first?.integer ?? -1)
            }
        }
        func check(_ expected: Int) throws {
            #expect(try store.pendingCount() == expected)
            #expect(try counted() == expected)
        }
        _ = try store.applySnapshot([ServerRecord(id: "a", revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#))],
                                    epoch: "e1", revision: 1)
        try check(0)
        try store.createRecord(id: "b", content: #"{"n":1}"#)
        try check(1)
        try store.updateRecord(id: "b", content: #"{"n":2}"#)  // coalesced into the create
        try check(1)
        #expect(throws: LayerSyncError.self) { try store.createRecord(id: "b", content: "{}") }  // rolled back
        try check(1)
        try store.updateRecord(id: "a", content: #"{"n":3}"#)
        try check(2)
        try store.deleteRecord(id: "b")  // a never-sent create and its delete cancel out
        try check(1)
        try store.addAttachment(id: String(repeating: "ab", count: 32), contentType: "text/plain")
        try check(2)
        try store.markAttachmentUploaded(id: String(repeating: "ab", count: 32))
        try check(1)
        let sent = try store.nextBatch(maxBytes: 10_000).batch
        _ = try store.applyAnswers(accepted: [.init(changeID: sent[0].changeID, recordID: "a", revision: 2)], rejected: [], sent: sent)
        try check(0)
        try store.deleteRecord(id: "a")
        try check(1)
        // A local write touches no full-text pages; a search indexes what changed first.
        #expect(try store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT count(*) FROM records WHERE fts_stale = 1").first?.first?.integer } == 1)
        #expect(try store.searchRecords(query: "n", limit: 10).isEmpty)
    }

    @Test func aServerChangeBeatsAnUnsentLocalChange() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        _ = try store.applySnapshot([ServerRecord(id: "a", revision: 1, deleted: false, content: try JSONValue.parse(#"{"id":"a","n":0}"#))],
                                    epoch: "e1", revision: 1)
        try store.updateRecord(id: "a", content: #"{"id":"a","n":"local"}"#)
        let outcome = try store.applyServerRecords(
            [ServerRecord(id: "a", revision: 2, deleted: false, content: try JSONValue.parse(#"{"id":"a","n":"server"}"#))], since: 2)
        #expect(outcome.rejections.map(\.recordID) == ["a"])
        #expect(outcome.rejections.first?.localJSON == #"{"id":"a","n":"local"}"#)
        #expect(outcome.rejections.first?.serverJSON == #"{"id":"a","n":"server"}"#)
        #expect(outcome.changes.updated == ["a"])
        #expect(try store.record(id: "a") == #"{"id":"a","n":"server"}"#)
        #expect(try store.pendingCount() == 0)
        #expect(try store.since() == 2)
    }

    @Test func aServerChangeForASentChangeWaitsForItsAnswer() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        _ = try store.applySnapshot([ServerRecord(id: "a", revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#))],
                                    epoch: "e1", revision: 1)
        try store.updateRecord(id: "a", content: #"{"n":1}"#)
        let sent = try store.nextBatch(maxBytes: 10_000).batch
        // Our own change comes back through the long-poll before the sync answer (lost response).
        let early = try store.applyServerRecords([ServerRecord(id: "a", revision: 2, deleted: false, content: try JSONValue.parse(#"{"n":1}"#))], since: 2)
        #expect(early.rejections.isEmpty)
        #expect(try store.pendingCount() == 1)
        let answer = try store.applyAnswers(accepted: [.init(changeID: sent[0].changeID, recordID: "a", revision: 2)], rejected: [], sent: sent)
        #expect(answer.rejections.isEmpty && answer.changes.isEmpty)
        #expect(try store.record(id: "a") == #"{"n":1}"#)
        #expect(try store.pendingCount() == 0)
    }

    @Test func anAnswerAppliedWithTheSentChangesRecordsWhatWasSent() throws {
        // The sync cycle passes the changes of the request (`sent`): their rows are found by queue
        // position and the sent content is taken from the payload. What lands must be what the
        // row-based path records.
        let store = try LayerStore.open(directory: temporaryDirectory())
        _ = try store.applySnapshot([ServerRecord(id: "u", revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#)),
                                     ServerRecord(id: "d", revision: 2, deleted: false, content: try JSONValue.parse(#"{"n":0}"#))],
                                    epoch: "e1", revision: 2)
        let created = #"{"id":"c","t":"é \"q\" 👋"}"#
        try store.createRecord(id: "c", content: created)
        try store.updateRecord(id: "u", content: #"{"n":1}"#)
        try store.deleteRecord(id: "d")
        try store.createRecord(id: "x", content: "{not json")  // sent with content null
        let sent = try store.nextBatch(maxBytes: 10_000).batch
        #expect(sent.map(\.recordID) == ["c", "u", "d", "x"])
        #expect(sent.map { $0.contentRange != nil } == [true, true, false, false])
        try store.updateRecord(id: "c", content: #"{"id":"c","t":"later"}"#)  // queued behind the sent create
        // Out of request order, one answer twice, one for a change id that was not sent.
        let accepted: [SyncAnswer.Accepted] = [
            .init(changeID: sent[2].changeID, recordID: "d", revision: 5), .init(changeID: sent[0].changeID, recordID: "c", revision: 3),
            .init(changeID: sent[1].changeID, recordID: "u", revision: 4), .init(changeID: sent[1].changeID, recordID: "u", revision: 4),
            .init(changeID: sent[3].changeID, recordID: "x", revision: 6), .init(changeID: "01NOTSENT", recordID: "u", revision: 9),
        ]
        let outcome = try store.applyAnswers(accepted: accepted, rejected: [], sent: sent)
        #expect(outcome.changes.isEmpty && outcome.rejections.isEmpty)
        let rows = try store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT id, server_revision, server_content, server_deleted FROM records ORDER BY id").map { row in
                [row[0].text, row[1].integer.map(String.init), row[2].text, row[3].integer.map(String.init)]
            }
        }
        #expect(rows == [["c", "3", created, "0"], ["d", "5", nil, "1"], ["u", "4", #"{"n":1}"#, "0"], ["x", "6", "{not json", "0"]])
        #expect(try pendingRows(store) == [["update", #"{"id":"c","t":"later"}"#, "0", "c"]])
        #expect(try store.pendingCount() == 1)
        #expect(try store.record(id: "c") == #"{"id":"c","t":"later"}"#)
    }

    @Test func anAnswerAboutChangesTheRequestDidNotCarryFindsThemByChangeIDAtMostOnce() throws {
        // Answered changes missing from `sent` are looked up by change id (a scan), then written
        // by queue position like the others: the same result, and an answer applied twice does
        // nothing the second time.
        let store = try LayerStore.open(directory: temporaryDirectory())
        _ = try store.applySnapshot([ServerRecord(id: "r", revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#))],
                                    epoch: "e1", revision: 1)
        try store.createRecord(id: "c", content: #"{"n":1}"#)
        try store.updateRecord(id: "r", content: #"{"n":"mine"}"#)
        let sent = try store.nextBatch(maxBytes: 10_000).batch
        #expect(sent.map(\.recordID) == ["c", "r"])
        try store.updateRecord(id: "c", content: #"{"n":2}"#)  // queued behind the sent create
        let theirs = ServerRecord(id: "r", revision: 3, deleted: false, content: try JSONValue.parse(#"{"n":"theirs"}"#))
        let accepted: [SyncAnswer.Accepted] = [.init(changeID: sent[0].changeID, recordID: "c", revision: 2)]
        let rejected: [SyncAnswer.Rejected] = [.init(changeID: sent[1].changeID, recordID: "r", reason: "conflict",
                                                                 serverRecord: theirs)]
        let outcome = try store.applyAnswers(accepted: accepted, rejected: rejected, sent: [])
        #expect(outcome.rejections.map { [$0.recordID, $0.reason, $0.localJSON, $0.serverJSON] }
                == [["r", "conflict", #"{"n":"mine"}"#, #"{"n":"theirs"}"#]])
        let server = try store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT id, server_revision, server_content FROM records ORDER BY id").map { row in
                [row[0].text, row[1].integer.map(String.init), row[2].text]
            }
        }
        #expect(server == [["c", "2", #"{"n":1}"#], ["r", "3", #"{"n":"theirs"}"#]])
        #expect(try store.record(id: "r") == #"{"n":"theirs"}"#)
        #expect(try pendingRows(store) == [["update", #"{"n":2}"#, "0", "c"]])
        let again = try store.applyAnswers(accepted: accepted, rejected: rejected, sent: [])
        #expect(again.changes.isEmpty && again.rejections.isEmpty)
        #expect(try pendingRows(store) == [["update", #"{"n":2}"#, "0", "c"]])
        #expect(try store.knownServerRevision(id: "c") == 2)
    }

    @Test func aRejectedChangeReportsTheNewestLocalEditQueuedBehindIt() throws {
        // Edits made while a change is in flight queue behind it; when the server rejects the
        // sent change they go with it (first writer wins), so the report must carry the newest
        // local version, not the intermediate one that was sent.
        let store = try LayerStore.open(directory: temporaryDirectory())
        _ = try store.applySnapshot([ServerRecord(id: "r", revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#)),
                                     ServerRecord(id: "s", revision: 1, deleted: false, content: try JSONValue.parse(#"{"m":0}"#))],
                                    epoch: "e1", revision: 1)
        try store.updateRecord(id: "r", content: #"{"n":"sent"}"#)
        try store.updateRecord(id: "s", content: #"{"m":"sent"}"#)
        let sent = try store.nextBatch(maxBytes: 10_000).batch
        #expect(sent.map(\.recordID) == ["r", "s"])
        try store.updateRecord(id: "r", content: #"{"n":"newest"}"#)  // while the request is in flight
        try store.deleteRecord(id: "s")
        let theirs = [ServerRecord(id: "r", revision: 2, deleted: false, content: try JSONValue.parse(#"{"n":"theirs"}"#)),
                      ServerRecord(id: "s", revision: 3, deleted: false, content: try JSONValue.parse(#"{"m":"theirs"}"#))]
        let rejected: [SyncAnswer.Rejected] = [
            .init(changeID: sent[0].changeID, recordID: "r", reason: "conflict", serverRecord: theirs[0]),
            .init(changeID: sent[1].changeID, recordID: "s", reason: "conflict", serverRecord: theirs[1]),
        ]
        let outcome = try store.applyAnswers(accepted: [], rejected: rejected, sent: sent)
        #expect(outcome.rejections.map { [$0.recordID, $0.localJSON, $0.serverJSON] }
                == [["r", #"{"n":"newest"}"#, #"{"n":"theirs"}"#], ["s", nil, #"{"m":"theirs"}"#]])
        #expect(try store.record(id: "r") == #"{"n":"theirs"}"#)
        #expect(try store.pendingCount() == 0)
    }

    @Test func aReplayedRejectionDoesNotTakeARecordBackToAnOlderServerVersion() throws {
        // The answer to a sync request was lost after the server rejected its change (conflict
        // with "theirs" at revision 2); meanwhile the long-poll brought a newer version (revision
        // 3) and raised `since` past it. The retry under the same change id replays the stored
        // outcome, with revision 2 as the server record. The record must stay at revision 3: no
        // later answer carries it again (the convergence test's divergence).
        let store = try downloadedStore(serverRecords: "r")
        try store.updateRecord(id: "r", content: #"{"n":"mine"}"#)
        let sent = try store.nextBatch(maxBytes: 10_000).batch
        let later = ServerRecord(id: "r", revision: 3, deleted: false, content: try JSONValue.parse(#"{"n":"theirs, later"}"#))
        #expect(try store.applyServerRecords([later], since: 3).rejections.isEmpty)
        let replayed = ServerRecord(id: "r", revision: 2, deleted: false, content: try JSONValue.parse(#"{"n":"theirs"}"#))
        let outcome = try store.applyAnswers(accepted: [], rejected: [.init(changeID: sent[0].changeID, recordID: "r",
                                                                            reason: "conflict", serverRecord: replayed)], sent: sent)
        #expect(outcome.rejections.map { [$0.recordID, $0.localJSON, $0.serverJSON] }
                == [["r", #"{"n":"mine"}"#, #"{"n":"theirs, later"}"#]])
        #expect(try store.record(id: "r") == #"{"n":"theirs, later"}"#)
        #expect(try store.knownServerRevision(id: "r") == 3)
        #expect(try store.pendingCount() == 0)
        #expect(try store.since() == 3)
    }

    @Test func aNewEpochKeepsAndRebasesPendingChanges() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        _ = try store.applySnapshot([ServerRecord(id: "a", revision: 5, deleted: false, content: try JSONValue.parse(#"{"n":0}"#)),
                                     ServerRecord(id: "b", revision: 6, deleted: false, content: try JSONValue.parse(#"{"n":0}"#))],
                                    epoch: "e1", revision: 6)
        try store.updateRecord(id: "a", content: #"{"n":"mine"}"#)
        _ = try store.nextBatch(maxBytes: 10_000)  // sent once, answer lost
        // The layer was restored: only "b" exists, at revision 1.
        let outcome = try store.applySnapshot([ServerRecord(id: "b", revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":9}"#))],
                                              epoch: "e2", revision: 1)
        #expect(outcome.changes.updated == ["b"])
        #expect(try store.record(id: "a") == #"{"n":"mine"}"#)
        let batch = try store.nextBatch(maxBytes: 10_000).batch
        #expect(batch.count == 1)
        #expect(try JSONValue.parse(batch[0].payload)["op"] == .string("create"))
        #expect(try store.epoch() == "e2")
    }

    @Test func anOversizedChangeIsDroppedAloneAndRevertedToTheServerVersion() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        _ = try store.applySnapshot([ServerRecord(id: "a", revision: 1, deleted: false, content: try JSONValue.parse(#"{"n":0}"#))],
                                    epoch: "e1", revision: 1)
        try store.updateRecord(id: "a", content: Self.large)
        try store.createRecord(id: "b", content: #"{"n":1}"#)
        let (batch, oversized) = try store.nextBatch(maxBytes: 1000)
        #expect(oversized.map(\.recordID) == ["a"])
        #expect(batch.map(\.recordID) == ["b"])
        let outcome = try store.dropChange(oversized[0], reason: "payload_too_large")
        #expect(outcome.rejections.first?.reason == "payload_too_large")
        #expect(try store.record(id: "a") == #"{"n":0}"#)
        #expect(try store.pendingCount() == 1)
    }

    /// A change sent and then dropped as too large (a 413 for it alone, from a server or proxy
    /// with a lower limit) goes alone: the edit queued behind it while it was in flight, the
    /// user's newest version, stays queued and is sent in its place (docs/rules.md rule 5; it used to go
    /// with the dropped change, unreported).
    @Test func aDroppedChangeKeepsTheEditsQueuedBehindIt() throws {
        let store = try downloadedStore(serverRecords: "a")
        let large = Self.large
        try store.updateRecord(id: "a", content: large)
        let sent = try store.nextBatch(maxBytes: 100_000).batch
        try store.updateRecord(id: "a", content: #"{"n":"fixed"}"#)  // while it is in flight
        #expect(try store.pendingCount() == 2)
        let outcome = try store.dropChange(sent[0], reason: "payload_too_large")
        #expect(outcome.rejections.map { [$0.recordID, $0.localJSON, $0.serverJSON] } == [["a", large, #"{"n":0}"#]])
        #expect(outcome.changes.updated.isEmpty)  // the local record keeps the newest edit
        #expect(try store.record(id: "a") == #"{"n":"fixed"}"#)
        #expect(try store.pendingCount() == 1)
        let next = try store.nextBatch(maxBytes: 100_000).batch
        #expect(next.map(\.recordID) == ["a"])
        let payload = try JSONValue.parse(try #require(next.first, "nothing left to send").payload)
        #expect(payload["op"]?.stringValue == "update" && payload["base_revision"]?.int64Value == 1)
        #expect(payload["content"]?["n"]?.stringValue == "fixed")
    }

    /// A dropped create never reached the server: the update queued behind it becomes the
    /// create, and a delete queued behind it has nothing to delete and goes too.
    @Test func aDroppedCreateHandsTheCreateToTheEditBehindIt() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        let large = Self.large
        try store.createRecord(id: "a", content: large)
        try store.createRecord(id: "b", content: large)
        let sent = try store.nextBatch(maxBytes: 100_000).batch
        #expect(sent.map(\.recordID) == ["a", "b"])
        try store.updateRecord(id: "a", content: #"{"n":"fixed"}"#)
        _ = try store.deleteRecord(id: "b")
        #expect(try store.pendingCount() == 4)
        let droppedA = try store.dropChange(sent[0], reason: "payload_too_large")
        #expect(droppedA.rejections.map { [$0.recordID, $0.localJSON, $0.serverJSON] } == [["a", large, nil]])
        #expect(try store.record(id: "a") == #"{"n":"fixed"}"#)
        let droppedB = try store.dropChange(sent[1], reason: "payload_too_large")
        #expect(droppedB.rejections.map(\.recordID) == ["b"] && droppedB.changes.deleted.isEmpty)
        #expect(try store.record(id: "b") == nil)
        #expect(try store.pendingCount() == 1)
        let next = try store.nextBatch(maxBytes: 100_000).batch
        #expect(next.map(\.recordID) == ["a"])
        let payload = try JSONValue.parse(try #require(next.first, "nothing left to send").payload)
        #expect(payload["op"]?.stringValue == "create" && payload["base_revision"] == nil)
        #expect(payload["content"]?["n"]?.stringValue == "fixed")
    }

    /// A change the server rejects as `invalid` goes alone, like one too large: the record
    /// reverts to its last known server version (it used to be deleted locally, as if the server
    /// had no such record), and an edit queued behind it, often its fix, is sent in its place.
    @Test func anInvalidChangeGoesAloneAndTheRecordKeepsItsServerVersion() throws {
        let store = try downloadedStore(serverRecords: "a", "b")
        try store.updateRecord(id: "a", content: #"{"n":"bad"}"#)
        try store.updateRecord(id: "b", content: #"{"n":"bad"}"#)
        try store.createRecord(id: "c", content: #"{"n":"bad"}"#)
        let sent = try store.nextBatch(maxBytes: 100_000).batch
        #expect(sent.map(\.recordID) == ["a", "b", "c"])
        try store.updateRecord(id: "b", content: #"{"n":"fixed"}"#)  // while the request is in flight
        try store.updateRecord(id: "c", content: #"{"n":"fixed"}"#)
        let rejected = sent.map { SyncAnswer.Rejected(changeID: $0.changeID, recordID: $0.recordID,
                                                                  reason: "invalid", serverRecord: nil) }
        let outcome = try store.applyAnswers(accepted: [], rejected: rejected, sent: sent)
        #expect(outcome.rejections.map { [$0.recordID, $0.localJSON, $0.serverJSON] }
                == [["a", #"{"n":"bad"}"#, #"{"n":0}"#], ["b", #"{"n":"bad"}"#, #"{"n":0}"#], ["c", #"{"n":"bad"}"#, nil]])
        #expect(try store.record(id: "a") == #"{"n":0}"#)
        #expect(try store.record(id: "b") == #"{"n":"fixed"}"#)
        #expect(try store.record(id: "c") == #"{"n":"fixed"}"#)
        #expect(try store.pendingCount() == 2)
        let next = try store.nextBatch(maxBytes: 100_000).batch
        let payloads = try next.map { try JSONValue.parse($0.payload) }
        #expect(next.map(\.recordID) == ["b", "c"])
        #expect(payloads.map { $0["op"]?.stringValue } == ["update", "create"])
        #expect(payloads.first?["base_revision"]?.int64Value == 1)
    }

    /// A change over the size limit comes back from `nextBatch` in `oversized` and is dropped
    /// later (in the sync cycle: after the request in flight ends). An edit made in between —
    /// typically the fix of what was too large — must not be dropped with it.
    @Test func anEditMadeBeforeAnOversizedChangeIsDroppedStaysQueued() throws {
        let store = try downloadedStore(serverRecords: "a", "b")
        let large = Self.large
        try store.updateRecord(id: "a", content: large)
        try store.updateRecord(id: "b", content: large)
        let taken = try store.nextBatch(maxBytes: 100_000, maxChangeBytes: 1000)
        #expect(taken.batch.isEmpty && taken.oversized.map(\.recordID) == ["a", "b"])
        try store.updateRecord(id: "a", content: #"{"n":"fixed"}"#)  // before the drop
        _ = try store.deleteRecord(id: "b")
        let droppedA = try store.dropChange(taken.oversized[0], reason: "payload_too_large")
        let droppedB = try store.dropChange(taken.oversized[1], reason: "payload_too_large")
        #expect(droppedA.rejections.first?.localJSON == large && droppedB.rejections.first?.localJSON == large)
        #expect(try store.record(id: "a") == #"{"n":"fixed"}"#)
        #expect(try store.record(id: "b") == nil)
        #expect(try store.pendingCount() == 2)
        let next = try store.nextBatch(maxBytes: 100_000, maxChangeBytes: 1000).batch
        #expect(next.map(\.recordID) == ["a", "b"])
        let payloads = try next.map { try JSONValue.parse($0.payload) }
        #expect(payloads.map { $0["op"]?.stringValue } == ["update", "delete"])
        #expect(payloads.first?["content"]?["n"]?.stringValue == "fixed")
    }

    /// A drop of a change that is no longer queued (a rebase replaced it) changes nothing: in
    /// particular the record's new change is not turned into a create.
    @Test func droppingAChangeNoLongerQueuedChangesNothing() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        _ = try store.applySnapshot([], epoch: "e1", revision: 0)
        let large = Self.large
        try store.createRecord(id: "a", content: large)
        let oversized = try store.nextBatch(maxBytes: 100_000, maxChangeBytes: 1000).oversized
        #expect(oversized.map(\.recordID) == ["a"])
        // A new epoch whose snapshot has the record: the create is re-based into an update.
        let rebased = try store.applySnapshot([ServerRecord(id: "a", revision: 3, deleted: false, content: try JSONValue.parse(#"{"n":0}"#))],
                                              epoch: "e2", revision: 3)
        #expect(rebased.rebased == ["a"])
        let outcome = try store.dropChange(oversized[0], reason: "payload_too_large")
        #expect(outcome.rejections.isEmpty)
        #expect(try store.pendingCount() == 1)
        let row = try store.nextBatch(maxBytes: 100_000).batch
        #expect(row.map(\.recordID) == ["a"])
        let payload = try JSONValue.parse(try #require(row.first).payload)
        #expect(payload["op"]?.stringValue == "update" && payload["base_revision"]?.int64Value == 3)
    }

    @Test func deletingARootDeletesItsComments() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        try store.createRecord(id: "root", content: #"{"type":"pspdfkit/note"}"#)
        try store.createRecord(id: "c1", content: #"{"type":"pspdfkit/comment","rootId":"root"}"#)
        try store.createRecord(id: "other", content: #"{"type":"pspdfkit/comment","rootId":"x"}"#)
        #expect(try store.deleteRecord(id: "root") == ["root", "c1"])
        #expect(try store.record(id: "c1") == nil)
        #expect(try store.record(id: "other") != nil)
    }

    @Test func listFiltersByPageTypeCreatorAndPages() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        try store.createRecord(id: "1", content: #"{"type":"pspdfkit/ink","pageIndex":0,"creatorName":"Ann"}"#)
        try store.createRecord(id: "2", content: #"{"type":"pspdfkit/note","pageIndex":1,"creatorName":"Bob"}"#)
        try store.createRecord(id: "3", content: #"{"type":"pspdfkit/ink","pageIndex":1,"creatorName":"Ann"}"#)
        #expect(try store.listRecords(filter: .init(pageIndex: 1)).count == 2)
        #expect(try store.listRecords(filter: .init(type: "pspdfkit/ink")).count == 2)
        #expect(try store.listRecords(filter: .init(creatorName: "Bob")).count == 1)
        #expect(try store.listRecords(filter: .init(limit: 1, offset: 1)) == [#"{"type":"pspdfkit/note","pageIndex":1,"creatorName":"Bob"}"#])
    }
}

@Suite struct LayerStoreMigrationTests {
    /// A store written by schema version 1 (no full-text index) opens, migrates to the
    /// current version, keeps its records and pending changes, and becomes searchable.
    @Test func aVersion1StoreIsMigratedInPlace() throws {
        let directory = temporaryDirectory("v1")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        do {
            let db = try SQLiteDatabase(path: directory + "/layer.sqlite")
            try db.execute("""
                PRAGMA journal_mode=WAL;
                CREATE TABLE records(id TEXT PRIMARY KEY NOT NULL, content TEXT, server_revision INTEGER,
                    server_content TEXT, server_deleted INTEGER NOT NULL DEFAULT 0);
                CREATE TABLE pending_changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, change_id TEXT NOT NULL UNIQUE,
                    record_id TEXT NOT NULL, op TEXT NOT NULL CHECK (op IN ('create','update','delete')), content TEXT,
                    attempted INTEGER NOT NULL DEFAULT 0, base_revision INTEGER, payload TEXT);
                CREATE INDEX pending_changes_record ON pending_changes(record_id, seq);
                CREATE TABLE meta(key TEXT PRIMARY KEY NOT NULL, value TEXT);
                INSERT INTO meta VALUES ('client_id', '01JYS36MGS2A3E1H83BK1ZRQVX'), ('downloaded', '1'), ('since', '7');
                INSERT INTO records VALUES ('old', '{"id":"old","type":"pspdfkit/note","note":"written by version one"}', 7,
                    '{"id":"old","type":"pspdfkit/note","note":"written by version one"}', 0);
                INSERT INTO records(id, content) VALUES ('new', '{"id":"new","type":"pspdfkit/note","note":"pending"}');
                INSERT INTO pending_changes(change_id, record_id, op, content) VALUES ('c1', 'new', 'create',
                    '{"id":"new","type":"pspdfkit/note","note":"pending"}');
                PRAGMA user_version = 1;
                """)
        }
        let store = try LayerStore.open(directory: directory)
        #expect(try store.withDatabase { db throws(LayerSyncError) in try db.query("PRAGMA user_version").first?.first?.integer } == LayerStore.schemaVersion)
        #expect(try store.record(id: "old")?.contains("version one") == true)
        #expect(try store.pendingCount() == 1)
        #expect(try store.since() == 7)
        #expect(try store.searchRecords(query: "version", limit: 10).count == 1)
        #expect(try store.searchRecords(query: "pending", limit: 10).count == 1)
    }

    /// A store written by schema version 4 (UNIQUE index on `pending_changes.change_id`) is
    /// migrated to version 5: the queue keeps its rows, their positions and its AUTOINCREMENT
    /// counter (a position is never used twice), loses the index, and syncs as before.
    @Test func aVersion4StoreLosesTheChangeIDIndexAndKeepsItsQueue() throws {
        let directory = temporaryDirectory("v4")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let note = #"{"id":"a","type":"pspdfkit/note","note":"four"}"#
        do {
            let db = try SQLiteDatabase(path: directory + "/layer.sqlite")
            try db.execute("""
                PRAGMA journal_mode=WAL;
                CREATE TABLE records(id TEXT PRIMARY KEY NOT NULL, content TEXT, server_revision INTEGER,
                    server_content TEXT, server_deleted INTEGER NOT NULL DEFAULT 0, fts_stale INTEGER NOT NULL DEFAULT 1);
                CREATE INDEX records_fts_stale ON records(fts_stale) WHERE fts_stale = 1;
                CREATE TRIGGER records_fts_mark AFTER UPDATE OF content ON records WHEN NEW.fts_stale = 0 BEGIN
                    UPDATE records SET fts_stale = 1 WHERE rowid = NEW.rowid;
                END;
                CREATE TABLE pending_changes(seq INTEGER PRIMARY KEY AUTOINCREMENT, change_id TEXT NOT NULL UNIQUE,
                    record_id TEXT NOT NULL, op TEXT NOT NULL CHECK (op IN ('create','update','delete')), content TEXT,
                    attempted INTEGER NOT NULL DEFAULT 0, base_revision INTEGER, payload TEXT);
                CREATE INDEX pending_changes_record ON pending_changes(record_id, seq);
                CREATE TABLE meta(key TEXT PRIMARY KEY NOT NULL, value TEXT);
                CREATE VIRTUAL TABLE records_fts USING fts5(body, tokenize = 'unicode61 remove_diacritics 2');
                CREATE TABLE attachments(id TEXT PRIMARY KEY NOT NULL, content_type TEXT NOT NULL, uploaded INTEGER NOT NULL DEFAULT 0);
                CREATE TABLE snapshot_staging(id TEXT PRIMARY KEY NOT NULL, revision INTEGER NOT NULL, content TEXT, deleted INTEGER NOT NULL);
                INSERT INTO meta VALUES ('client_id', '01JYS36MGS2A3E1H83BK1ZRQVX'), ('downloaded', '1'), ('since', '7'), ('epoch', 'e');
                INSERT INTO records(id, content, server_revision, server_content) VALUES ('a', '\(note)', 7, '{"id":"a"}');
                INSERT INTO records(id, content) VALUES ('b', '{"id":"b"}');
                INSERT INTO pending_changes(seq, change_id, record_id, op, content, attempted, base_revision)
                    VALUES (3, '01JYS36MGS2A3E1H83BK1ZRQV3', 'a', 'update', '\(note)', 1, 7);
                INSERT INTO pending_changes(seq, change_id, record_id, op, content) VALUES (4, '01JYS36MGS2A3E1H83BK1ZRQV4', 'b', 'create', '{"id":"b"}');
                INSERT INTO pending_changes(seq, change_id, record_id, op, content) VALUES (9, '01JYS36MGS2A3E1H83BK1ZRQV9', 'c', 'create', '{}');
                DELETE FROM pending_changes WHERE seq = 9;
                PRAGMA user_version = 4;
                """)
        }
        let store = try LayerStore.open(directory: directory)
        let schema = try store.withDatabase { db throws(LayerSyncError) in
            (try db.query("PRAGMA user_version").first?.first?.integer,
             try db.query("SELECT name FROM pragma_index_list('pending_changes') ORDER BY name").compactMap { $0.first?.text },
             try db.query("SELECT seq, change_id, op, attempted, base_revision FROM pending_changes ORDER BY seq").map { row in
                 row.map { $0.integer.map(String.init) ?? $0.text }
             })
        }
        #expect(schema.0 == LayerStore.schemaVersion)
        #expect(schema.1 == ["pending_changes_record"])
        // Opening sealed the unsent create (attempted 1, a create has no base).
        #expect(schema.2 == [["3", "01JYS36MGS2A3E1H83BK1ZRQV3", "update", "1", "7"], ["4", "01JYS36MGS2A3E1H83BK1ZRQV4", "create", "1", nil]])
        // The next queued change gets a position after every one ever used.
        try store.createRecord(id: "d", content: #"{"id":"d"}"#)
        let sent = try store.nextBatch(maxBytes: 10_000).batch
        #expect(sent.map(\.sequence) == [3, 4, 10])
        #expect(try JSONValue.parse(sent[0].payload)["content"]?["note"] == .string("four"))
        _ = try store.applyAnswers(accepted: sent.enumerated().map { .init(changeID: $1.changeID, recordID: $1.recordID, revision: 8 + Int64($0)) },
                                   rejected: [], sent: sent)
        #expect(try store.pendingCount() == 0)
        #expect(try store.knownServerRevision(id: "a") == 8)
        #expect(try store.record(id: "a") == note)
    }

    /// A store from a newer library opens in the needs-reset mode: not used, not damaged.
    @Test func aStoreFromANewerSchemaNeedsAResetAndIsNotWritten() throws {
        let directory = temporaryDirectory("v99")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        do {
            let db = try SQLiteDatabase(path: directory + "/layer.sqlite")
            try db.execute("PRAGMA user_version = 99;")
        }
        let store = try LayerStore.open(directory: directory)
        #expect(store.needsDatabaseReset)
        do {
            _ = try store.meta("client_id")
            Issue.record("read a newer schema")
        } catch {
            #expect(error.code == .invalidState)
        }
        store.close()
        let db = try SQLiteDatabase(path: directory + "/layer.sqlite")
        #expect(try db.query("PRAGMA user_version").first?.first?.integer == 99)
        #expect(try db.query("SELECT count(*) FROM sqlite_master").first?.first?.integer == 0)
    }
}
