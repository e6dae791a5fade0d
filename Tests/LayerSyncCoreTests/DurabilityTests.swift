import Foundation
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel
@testable import LayerSyncStore

/// Commit durability (``CommitDurability``, docs/durability.md): API writes commit with an
/// fsync, the engine's own writes without one, and a store seals its unfrozen changes when it
/// opens, so that a freeze undone by a power loss cannot lose a later edit.
@Suite struct DurabilityTests {
    private func pendingRows(_ store: LayerStore) throws -> [[String?]] {
        try store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT record_id, op, attempted, base_revision, content FROM pending_changes ORDER BY seq").map { row in
                [row[0].text, row[1].text, row[2].integer.map(String.init), row[3].integer.map(String.init), row[4].text]
            }
        }
    }

    /// The connection's commit counts and its `PRAGMA synchronous` as SQLite reports it (read
    /// directly, not through `withDatabase`).
    private static func commits(_ store: LayerStore) throws -> (counts: SQLiteDatabase.CommitCounts, synchronous: Int64?) {
        let result: (SQLiteDatabase.CommitCounts, Int64?)? = store.database.withLock { db in
            guard let db else { return nil }
            return (db.commitCounts, try? db.query("PRAGMA synchronous").first?.first?.integer)
        }
        return try #require(result)
    }

    private static let full: Int64 = 2, normal: Int64 = 1  // PRAGMA synchronous values

    /// Checks, one piece of work at a time, how many transactions it committed and with which
    /// durability, and that SQLite's `synchronous` afterwards is the one that durability sets.
    private final class CommitCheck {
        let store: LayerStore
        private(set) var before: SQLiteDatabase.CommitCounts

        init(_ store: LayerStore) throws {
            self.store = store
            before = try DurabilityTests.commits(store).counts
        }

        /// Runs `work` and checks it committed exactly `count` transactions, all with `durability`.
        func expect(_ durability: CommitDurability, count: Int = 1, _ what: String,
                    _ work: () throws -> Void) throws {
            try work()
            let (after, synchronous) = try DurabilityTests.commits(store)
            let full = after.full - before.full, relaxed = after.relaxed - before.relaxed
            if durability == .full {
                #expect(full == count && relaxed == 0, "\(what): \(full) FULL, \(relaxed) NORMAL commits")
                #expect(synchronous == DurabilityTests.full, "\(what): synchronous = \(synchronous ?? -1)")
            } else {
                #expect(full == 0 && relaxed == count, "\(what): \(full) FULL, \(relaxed) NORMAL commits")
                #expect(synchronous == DurabilityTests.normal, "\(what): synchronous = \(synchronous ?? -1)")
            }
            #expect(after.last == durability, "\(what)")
            before = after
        }
    }

    @Test func apiWritesCommitWithFsyncAndEngineWritesWithout() throws {
        let store = try LayerStore.open(directory: temporaryDirectory())
        let check = try CommitCheck(store)

        try check.expect(.full, "createRecord") { try store.createRecord(id: "a", content: #"{"n":1}"#) }
        let sent = try store.nextBatch(maxBytes: 10_000).batch
        try check.expect(.relaxed, "nextBatch (freeze)") {}
        try check.expect(.full, "updateRecord") { try store.updateRecord(id: "a", content: #"{"n":2}"#) }
        try check.expect(.relaxed, "applyAnswers") {
            _ = try store.applyAnswers(accepted: [.init(changeID: sent[0].changeID, recordID: "a", revision: 3)], rejected: [], sent: sent)
        }
        try check.expect(.relaxed, "applyServerRecords") {
            _ = try store.applyServerRecords([ServerRecord(id: "b", revision: 4, deleted: false, content: try JSONValue.parse("{}"))], since: 4)
        }
        try check.expect(.full, "applyServerRecords for an API call") {
            _ = try store.applyServerRecords([ServerRecord(id: "c", revision: 5, deleted: false, content: try JSONValue.parse("{}"))],
                                             since: nil, durability: .full)
        }
        try check.expect(.full, count: 1, "deleteRecord") { try store.deleteRecord(id: "b") }
        try check.expect(.relaxed, "searchRecords (lazy full-text indexing)") { _ = try store.searchRecords(query: "n", limit: 1) }
        try check.expect(.full, "addAttachment") { try store.addAttachment(id: String(repeating: "0", count: 64), contentType: "image/png") }
        try check.expect(.relaxed, count: 3, "download (begin, stage, finish)") {
            try store.beginSnapshot()
            try store.stageSnapshotPage([ServerRecord(id: "d", revision: 6, deleted: false, content: try JSONValue.parse("{}"))])
            _ = try store.finishSnapshot(epoch: "e", revision: 6, reportChanges: true)
        }
        try check.expect(.relaxed, "last_sync_time") { try store.setMeta("last_sync_time", "1", durability: .relaxed) }
        // Reads leave the connection's mode as it is (API reads, which would commit FULL, between
        // engine writes: no FULL -> NORMAL -> FULL flips in a sync round); the next write sets it.
        _ = try store.record(id: "a")
        _ = try store.since()
        _ = try store.epoch()
        #expect(try Self.commits(store).synchronous == Self.normal)
        try check.expect(.full, "setMeta") { try store.setMeta("user_id", "alice") }
        // Reads commit nothing, whatever the mode.
        _ = try store.record(id: "a")
        _ = try store.pendingCount()
        #expect(try Self.commits(store).counts == check.before)
    }

    @Test func withNormalDurabilityAPIWritesCommitWithoutFsyncAndAFreezeMakesThemDurable() throws {
        let store = try LayerStore.open(directory: temporaryDirectory(), localWriteDurability: .relaxed)
        #expect(store.localWriteDurability == .relaxed)
        let check = try CommitCheck(store)

        try check.expect(.relaxed, "createRecord") { try store.createRecord(id: "a", content: #"{"n":1}"#) }
        try check.expect(.relaxed, "updateRecord") { try store.updateRecord(id: "a", content: #"{"n":2}"#) }
        // The batch holds a write no fsync has covered yet: it is frozen with one.
        var sent: [PendingChange] = []
        try check.expect(.full, "nextBatch (freeze) after relaxed API writes") { sent = try store.nextBatch(maxBytes: 10_000).batch }
        #expect(sent.map(\.recordID) == ["a"])
        try check.expect(.relaxed, "applyAnswers") {
            _ = try store.applyAnswers(accepted: [.init(changeID: sent[0].changeID, recordID: "a", revision: 3)], rejected: [], sent: sent)
        }
        try check.expect(.relaxed, "applyServerRecords") {
            _ = try store.applyServerRecords([ServerRecord(id: "b", revision: 4, deleted: false, content: try JSONValue.parse("{}"))], since: 4)
        }
        try check.expect(.relaxed, "deleteRecord") { try store.deleteRecord(id: "b") }
        try check.expect(.relaxed, "addAttachment") { try store.addAttachment(id: String(repeating: "0", count: 64), contentType: "image/png") }
        try check.expect(.relaxed, "setMeta") { try store.setMeta("user_id", "alice") }
        try check.expect(.relaxed, "last_sync_time") { try store.setMeta("last_sync_time", "1", durability: .relaxed) }
        // A relaxed write that only added a queue row (nothing was queued for "b"): no fsync needed
        // to send it; undone by a power loss, its change id is gone with it.
        try check.expect(.relaxed, "nextBatch after a relaxed delete that added a row") {
            let batch = try store.nextBatch(maxBytes: 10_000).batch
            #expect(batch.map(\.recordID) == ["b"])
        }
        // An edit coalesced into an unsent change rewrites it: the freeze fsyncs again.
        try check.expect(.relaxed, "createRecord") { try store.createRecord(id: "e", content: #"{"n":5}"#) }
        try check.expect(.relaxed, "updateRecord (coalesced)") { try store.updateRecord(id: "e", content: #"{"n":6}"#) }
        try check.expect(.full, "nextBatch after a relaxed rewrite") {
            let batch = try store.nextBatch(maxBytes: 10_000).batch
            #expect(batch.map(\.recordID) == ["b", "e"])
        }
        // A relaxed API write that a later FULL commit already made durable needs no fsync to be sent.
        try check.expect(.relaxed, "createRecord") { try store.createRecord(id: "c", content: #"{"n":3}"#) }
        try check.expect(.full, "a FULL commit") { try store.setMeta("x", "1", durability: .full) }
        try check.expect(.relaxed, "nextBatch (freeze) of durable writes") {
            let batch = try store.nextBatch(maxBytes: 10_000).batch
            #expect(batch.map(\.recordID) == ["b", "e", "c"])
        }
        // Engine writes alone never make a freeze fsync.
        try check.expect(.relaxed, "applyServerRecords") {
            _ = try store.applyServerRecords([ServerRecord(id: "d", revision: 5, deleted: false, content: try JSONValue.parse("{}"))], since: 5)
        }
        try check.expect(.relaxed, "nextBatch with nothing new to freeze") { _ = try store.nextBatch(maxBytes: 10_000) }
    }

    /// The pipelined cycle freezes its next batch while applying a sync answer
    /// (``LayerStore/applySyncAnswer(_:sent:since:lastSyncTime:next:)``): that freeze follows the same
    /// rule as ``LayerStore/nextBatch(_:)`` (an fsync first when a relaxed rewrite of a queued
    /// change is not durable yet).
    @Test func withNormalDurabilityTheFreezeWhileApplyingAnAnswerFsyncsAfterARelaxedRewrite() throws {
        let store = try LayerStore.open(directory: temporaryDirectory(), localWriteDurability: .relaxed)
        let check = try CommitCheck(store)
        try check.expect(.relaxed, "createRecord f") { try store.createRecord(id: "f", content: #"{"n":1}"#) }
        try check.expect(.relaxed, "createRecord g") { try store.createRecord(id: "g", content: #"{"n":2}"#) }
        var inFlight: [PendingChange] = []
        try check.expect(.relaxed, "nextBatch of f (new rows only)") {
            inFlight = try store.nextBatch(LayerStore.BatchLimits(maxBytes: 10_000, maxCount: 1)).batch
        }
        #expect(inFlight.map(\.recordID) == ["f"])
        try check.expect(.relaxed, "updateRecord g (coalesced)") { try store.updateRecord(id: "g", content: #"{"n":3}"#) }
        var gInFlight: Set<Int64> = []
        try check.expect(.full, "applySyncAnswer freezing g after a relaxed rewrite") {
            let answer = SyncAnswer(epoch: "e", revision: 7, epochChanged: false,
                                    accepted: [.init(changeID: inFlight[0].changeID, recordID: "f", revision: 7)],
                                    rejected: [], changes: [], hasMore: false, nextSince: 7)
            let round = try store.applySyncAnswer(answer, sent: inFlight, since: 7, lastSyncTime: nil,
                                                  next: LayerStore.BatchLimits(maxBytes: 10_000))
            #expect(round.next?.batch.map(\.recordID) == ["g"])
            gInFlight = Set(round.next?.batch.map(\.sequence) ?? [])
        }
        // A FULL freeze that freezes nothing syncs nothing: the rewrite stays "not durable".
        var h: [PendingChange] = []
        try check.expect(.relaxed, "createRecord h") { try store.createRecord(id: "h", content: #"{"n":4}"#) }
        try check.expect(.relaxed, "nextBatch of h") {
            h = try store.nextBatch(LayerStore.BatchLimits(maxBytes: 10_000, inFlight: gInFlight)).batch
        }
        #expect(h.map(\.recordID) == ["h"])
        try check.expect(.relaxed, "updateRecord h (a row behind the frozen one)") { try store.updateRecord(id: "h", content: #"{"n":5}"#) }
        try check.expect(.relaxed, "updateRecord h (coalesced)") { try store.updateRecord(id: "h", content: #"{"n":6}"#) }
        // Its record is in flight, so the rewritten row can't go yet: a FULL commit that freezes
        // nothing (and so syncs nothing).
        try check.expect(.full, "nextBatch while h is in flight: nothing to freeze") {
            let batch = try store.nextBatch(LayerStore.BatchLimits(maxBytes: 10_000, inFlight: gInFlight.union(h.map(\.sequence))))
            #expect(batch.batch.isEmpty)
        }
        try check.expect(.full, "applySyncAnswer freezing h's rewrite") {
            let answer = SyncAnswer(epoch: "e", revision: 9, epochChanged: false,
                                    accepted: [.init(changeID: h[0].changeID, recordID: "h", revision: 9)],
                                    rejected: [], changes: [], hasMore: false, nextSince: 9)
            let round = try store.applySyncAnswer(answer, sent: h, since: 9, lastSyncTime: nil,
                                                  next: LayerStore.BatchLimits(maxBytes: 10_000, inFlight: gInFlight))
            #expect(round.next?.batch.map(\.recordID).contains("h") == true)
        }
    }

    @Test func aStoreSharedByOpenersWithDifferentDurabilityUsesTheStrictest() throws {
        let directory = temporaryDirectory()
        let first = try LayerStore.open(directory: directory, localWriteDurability: .relaxed)
        #expect(first.localWriteDurability == .relaxed)
        // An opener that makes no API writes (listing, removal) has no say.
        #expect(try LayerStore.open(directory: directory).localWriteDurability == .relaxed)
        try first.createRecord(id: "a", content: "{}")
        #expect(try Self.commits(first).counts.last == .relaxed)
        // One opener asking for FULL makes every API write of the shared store FULL...
        let second = try LayerStore.open(directory: directory, localWriteDurability: .full)
        #expect(second === first && first.localWriteDurability == .full)
        try first.createRecord(id: "b", content: "{}")
        #expect(try Self.commits(first).counts.last == .full)
        // ...and it stays FULL for the instance's life, whatever later openers ask.
        _ = try LayerStore.open(directory: directory, localWriteDurability: .relaxed)
        #expect(first.localWriteDurability == .full)
        first.close()
        // A new instance starts over.
        let reopened = try LayerStore.open(directory: directory, localWriteDurability: .relaxed)
        #expect(reopened !== first && reopened.localWriteDurability == .relaxed)
        // With no opener asking, API writes are FULL.
        #expect(try LayerStore.open(directory: temporaryDirectory()).localWriteDurability == .full)
    }

    @Test func openingAStoreSealsEveryUnfrozenChangeAndLaterEditsGetTheirOwnRow() throws {
        let directory = temporaryDirectory()
        do {
            let store = try LayerStore.open(directory: directory)
            // "queued": a frozen (sent) create, with an update queued behind it.
            try store.createRecord(id: "queued", content: #"{"q":1}"#)
            #expect(try store.nextBatch(maxBytes: 10_000).batch.map(\.recordID) == ["queued"])
            try store.updateRecord(id: "queued", content: #"{"q":2}"#)
            // "known": a server record (revision 5) edited locally, not sent yet.
            _ = try store.applyServerRecords([ServerRecord(id: "known", revision: 5, deleted: false, content: try JSONValue.parse(#"{"k":0}"#))],
                                             since: 5)
            try store.updateRecord(id: "known", content: #"{"k":1}"#)
            // "new": created locally, not sent yet.
            try store.createRecord(id: "new", content: #"{"n":1}"#)
            #expect(try pendingRows(store).map { $0[2] } == ["1", "0", "0", "0"])
            store.close()
        }
        let store = try LayerStore.open(directory: directory)
        // One FULL transaction sealed them: the first change of a record frozen as a batch would
        // freeze it (base = the record's server revision), the one behind "queued" sealed (2).
        #expect(try Self.commits(store).counts == SQLiteDatabase.CommitCounts(full: 1, relaxed: 0, last: .full))
        #expect(try pendingRows(store) == [["queued", "create", "1", nil, #"{"q":1}"#],
                                           ["queued", "update", "2", nil, #"{"q":2}"#],
                                           ["known", "update", "1", "5", #"{"k":1}"#],
                                           ["new", "create", "1", nil, #"{"n":1}"#]])
        // Later edits never change a sealed row.
        try store.updateRecord(id: "queued", content: #"{"q":3}"#)
        try store.updateRecord(id: "known", content: #"{"k":2}"#)
        try store.updateRecord(id: "new", content: #"{"n":2}"#)
        #expect(try pendingRows(store).map { [$0[0], $0[2], $0[4]] } == [
            ["queued", "1", #"{"q":1}"#], ["queued", "2", #"{"q":2}"#], ["known", "1", #"{"k":1}"#], ["new", "1", #"{"n":1}"#],
            ["queued", "0", #"{"q":3}"#], ["known", "0", #"{"k":2}"#], ["new", "0", #"{"n":2}"#]])
        #expect(try store.pendingCount() == 7)
        // The sealed changes go out as they were; the one behind "queued" waits for its answer
        // and then gets the accepted revision as its base.
        let batch = try store.nextBatch(maxBytes: 100_000).batch
        #expect(batch.map(\.recordID) == ["queued", "known", "new"])
        #expect(try JSONValue.parse(batch[1].payload)["base_revision"] == .number("5"))
        _ = try store.applyAnswers(accepted: [.init(changeID: batch[0].changeID, recordID: "queued", revision: 7)], rejected: [], sent: batch)
        let next = try store.nextBatch(maxBytes: 100_000, maxCount: 1).batch
        let payload = try JSONValue.parse(try #require(next.first).payload)
        #expect(payload["op"] == .string("update") && payload["base_revision"] == .number("7") && payload["content"]?["q"] == .number("2"))
        store.close()
        // Nothing left to seal... except the three later edits; a store whose changes are all
        // frozen opens without writing.
        let again = try LayerStore.open(directory: directory)
        #expect(try Self.commits(again).counts.full == 1)
        again.close()
        let third = try LayerStore.open(directory: directory)
        #expect(try Self.commits(third).counts == SQLiteDatabase.CommitCounts())
    }

    @Test func aStoreThatNeedsContentMigrationIsNotSealedSoItsUnsentChangesAreMigrated() throws {
        let directory = temporaryDirectory()
        let v1 = #"{"id":"old","v":1,"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"icon":"comment","text":"plain"}"#
        do {
            let store = try LayerStore.open(directory: directory)
            try store.createRecord(id: "old", content: v1)
            try store.setMeta("content_version", "1")  // written by a library that stored Instant JSON v1
            store.close()
        }
        let store = try LayerStore.open(directory: directory)
        #expect(try pendingRows(store).map { $0[2] } == ["0"])
        try store.migrateContent()
        let content = try JSONValue.parse(try #require(try pendingRows(store).first?[4]))
        #expect(content["v"] == .integer(2) && content["text"]?["value"] == .string("plain"))
        store.close()
        // Once migrated, the next open seals as usual.
        let migrated = try LayerStore.open(directory: directory)
        #expect(try pendingRows(migrated).map { $0[2] } == ["1"])
    }
}

/// A simulated power loss against the real server: the store is rebuilt from its database file
/// and the WAL cut back to where it was after the last FULL commit.
@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class PowerLossTests {
    let server: TestServer

    init() throws {
        server = try TestServer()
    }

    func downloaded(_ client: TestClient, documentID: String) throws -> DocumentDescriptor {
        let document = try client.client.document(forJWT: try server.token(documentID: documentID, userID: "alice"))
        try document.download()
        let result = try #require(client.events.waitForDownload(document))
        if let error = result { throw error }
        return document
    }

    func syncUntilClean(_ client: TestClient, _ document: DocumentDescriptor) throws {
        for _ in 0..<10 {
            let start = client.events.count
            try document.sync()
            let end = try #require(client.events.waitForSyncEnd(document, after: start), "sync did not end")
            if end == nil, !document.hasUnsyncedChanges { return }
        }
        Issue.record("no clean sync")
    }

    func rejections(_ client: TestClient) -> [RejectedChange] {
        client.events.all.flatMap { event -> [RejectedChange] in
            if case .didRejectChanges(_, let list) = event { return list }
            return []
        }
    }

    func history(_ documentID: String, _ recordID: String) throws -> [JSONValue] {
        let token = try server.token(documentID: documentID)
        let body = try TestServer.httpGet(server.url + "/sync/v1/documents/\(documentID)/layers/~/records/\(recordID)/history",
                                          headers: ["Authorization": "Bearer \(token)"])
        return try JSONValue.parse(body)["versions"]?.arrayValue ?? []
    }

    private func counts(_ store: LayerStore) throws -> SQLiteDatabase.CommitCounts {
        try #require(store.database.withLock { $0?.commitCounts })
    }

    @Test func aFreezeLostInAPowerLossNeitherLosesTheEditNorALaterOne() throws {
        try server.upload(documentID: "doc")
        let a = try server.makeClient("a")
        let document = try downloaded(a, documentID: "doc")
        let store = document.store
        let databasePath = store.directory + "/layer.sqlite"

        // The API write: FULL. What is on disk now survives a power loss.
        let id = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("v1")))["id"]?.stringValue)
        let durable = try counts(store)
        #expect(durable.last == .full)
        let databaseBytes = try Data(contentsOf: URL(fileURLWithPath: databasePath))
        let walPrefix = try Data(contentsOf: URL(fileURLWithPath: databasePath + "-wal"))
        let changeID = try #require(try store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT change_id FROM pending_changes WHERE record_id = ?", [.text(id)]).first?.first?.text
        })

        // The sync freezes the change, the server applies it, the answer is applied: all without fsync.
        try syncUntilClean(a, document)
        #expect(try server.serverAnnotations(documentID: "doc")[id]?["note"] == .string("v1"))
        let synced = try counts(store)
        #expect(synced.full == durable.full, "a sync cycle committed with fsync")
        #expect(synced.relaxed > durable.relaxed)
        // No checkpoint ran meanwhile: the database file and the WAL's first frames are as they were.
        let wal = try Data(contentsOf: URL(fileURLWithPath: databasePath + "-wal"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: databasePath)) == databaseBytes)
        #expect(wal.count > walPrefix.count && wal.prefix(walPrefix.count) == walPrefix)
        try a.client.shutdown()

        // Power loss: the relaxed commits never reached the disk. Rebuild the storage with the
        // WAL as it was after the FULL commit (SQLite rebuilds the -shm index from it).
        let copy = server.storagePath("a-after-power-loss")
        try FileManager.default.copyItem(atPath: server.storagePath("a"), toPath: copy)
        let copiedDatabase = copy + String(databasePath.dropFirst(server.storagePath("a").count))
        try? FileManager.default.removeItem(atPath: copiedDatabase + "-shm")
        try databaseBytes.write(to: URL(fileURLWithPath: copiedDatabase))
        try walPrefix.write(to: URL(fileURLWithPath: copiedDatabase + "-wal"))

        let b = try server.makeClient("b", storage: copy)
        let reopened = try b.client.document(forJWT: try server.token(documentID: "doc", userID: "alice"))
        // The local edit is there, still queued, sealed under its change id.
        #expect(try JSONValue.parse(try reopened.annotation(id: id))["note"] == .string("v1"))
        let rows = try reopened.store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT change_id, attempted FROM pending_changes ORDER BY seq").map { [$0[0].text, $0[1].integer.map(String.init)] }
        }
        #expect(rows == [[changeID, "1"]])
        // An edit now gets a change of its own instead of riding on the one the server already has.
        _ = try reopened.updateAnnotation(json: TestServer.note("v2", id: id))
        #expect(try reopened.store.withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT count(*) FROM pending_changes").first?.first?.integer } == 2)
        try syncUntilClean(b, reopened)
        // The resent create was answered with its recorded outcome (applied once, no rejection),
        // and the edit reached the server.
        #expect(rejections(b).isEmpty, "\(rejections(b))")
        #expect(try server.serverAnnotations(documentID: "doc")[id]?["note"] == .string("v2"))
        #expect(try history("doc", id).count == 2)
        #expect(try JSONValue.parse(try reopened.annotation(id: id))["note"] == .string("v2"))
        try b.client.shutdown()
    }

    /// `LAYERSYNC_DURABILITY_NORMAL`: API writes commit without fsync. A change created and then
    /// updated (coalesced into one row) is sent, and the power loss comes afterwards. A power loss
    /// may undo any commit after the last FULL one: if the update were not durable before the
    /// change was sent, the store could come back with the create's content under the change id
    /// the server applied with the update's, and the retry's recorded answer would mark the old
    /// content as the server's version (local and server diverge for good).
    @Test func withNormalDurabilityWhatWasSentSurvivesAPowerLoss() throws {
        try server.upload(documentID: "doc-normal")
        let a = try server.makeClient("a", durability: .relaxed)
        let document = try downloaded(a, documentID: "doc-normal")
        let store = document.store
        let databasePath = store.directory + "/layer.sqlite"
        // (FULL commits so far, database file, WAL) after each step: the power-loss candidates.
        var snapshots: [(full: Int, database: Data, wal: Data)] = []
        func snapshot() throws {
            snapshots.append((try counts(store).full, try Data(contentsOf: URL(fileURLWithPath: databasePath)),
                              try Data(contentsOf: URL(fileURLWithPath: databasePath + "-wal"))))
        }

        let id = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("v1")))["id"]?.stringValue)
        #expect(try counts(store).last == .relaxed)
        try snapshot()
        _ = try document.updateAnnotation(json: TestServer.note("v2", id: id))
        try snapshot()
        try syncUntilClean(a, document)
        #expect(try server.serverAnnotations(documentID: "doc-normal")[id]?["note"] == .string("v2"))
        try snapshot()
        try a.client.shutdown()
        // No checkpoint ran meanwhile: each snapshot's WAL extends the previous one.
        #expect(Set(snapshots.map(\.database)).count == 1)
        for (earlier, later) in zip(snapshots, snapshots.dropFirst()) {
            #expect(later.wal.count >= earlier.wal.count && later.wal.prefix(earlier.wal.count) == earlier.wal)
        }

        // The power loss keeps the least a real one may keep: the earliest snapshot that holds
        // every FULL commit. The send's fsync makes that the last one.
        let final = try #require(snapshots.last).full
        let kept = try #require(snapshots.firstIndex { $0.full == final })
        #expect(kept == snapshots.count - 1, "a power loss could go back to step \(kept) although the update was sent")
        let copy = server.storagePath("a-normal-after-power-loss")
        try FileManager.default.copyItem(atPath: server.storagePath("a"), toPath: copy)
        let copiedDatabase = copy + String(databasePath.dropFirst(server.storagePath("a").count))
        try? FileManager.default.removeItem(atPath: copiedDatabase + "-shm")
        try snapshots[kept].database.write(to: URL(fileURLWithPath: copiedDatabase))
        try snapshots[kept].wal.write(to: URL(fileURLWithPath: copiedDatabase + "-wal"))

        let b = try server.makeClient("b", storage: copy, durability: .relaxed)
        let reopened = try b.client.document(forJWT: try server.token(documentID: "doc-normal", userID: "alice"))
        try syncUntilClean(b, reopened)
        // Local and server agree, on the content that was sent, with no conflict reported.
        #expect(rejections(b).isEmpty, "\(rejections(b))")
        #expect(try server.serverAnnotations(documentID: "doc-normal")[id]?["note"] == .string("v2"))
        #expect(try JSONValue.parse(try reopened.annotation(id: id))["note"] == .string("v2"))
        // A later edit reaches the server too.
        _ = try reopened.updateAnnotation(json: TestServer.note("v3", id: id))
        try syncUntilClean(b, reopened)
        #expect(try server.serverAnnotations(documentID: "doc-normal")[id]?["note"] == .string("v3"))
        try b.client.shutdown()
    }

    /// `LAYERSYNC_DURABILITY_NORMAL`: a new record's change (a row added, nothing rewritten) is
    /// sent without an fsync. A power loss that undoes the create, its freeze and the answer
    /// leaves no trace of it locally; the server applied it, and the next pull brings it back.
    @Test func withNormalDurabilityANewChangeSentBeforeItsFsyncComesBackFromTheServer() throws {
        try server.upload(documentID: "doc-new")
        let a = try server.makeClient("a", durability: .relaxed)
        let document = try downloaded(a, documentID: "doc-new")
        let store = document.store
        let databasePath = store.directory + "/layer.sqlite"
        let before = try counts(store)
        let databaseBytes = try Data(contentsOf: URL(fileURLWithPath: databasePath))
        let walBefore = try Data(contentsOf: URL(fileURLWithPath: databasePath + "-wal"))

        let id = try #require(try JSONValue.parse(try document.createAnnotation(json: TestServer.note("v1")))["id"]?.stringValue)
        try syncUntilClean(a, document)
        #expect(try server.serverAnnotations(documentID: "doc-new")[id]?["note"] == .string("v1"))
        #expect(try counts(store).full == before.full, "create and sync committed with fsync")
        let wal = try Data(contentsOf: URL(fileURLWithPath: databasePath + "-wal"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: databasePath)) == databaseBytes)
        #expect(wal.count > walBefore.count && wal.prefix(walBefore.count) == walBefore)
        try a.client.shutdown()

        // Power loss back to the last FULL commit: the create never happened locally.
        let copy = server.storagePath("a-new-after-power-loss")
        try FileManager.default.copyItem(atPath: server.storagePath("a"), toPath: copy)
        let copiedDatabase = copy + String(databasePath.dropFirst(server.storagePath("a").count))
        try? FileManager.default.removeItem(atPath: copiedDatabase + "-shm")
        try databaseBytes.write(to: URL(fileURLWithPath: copiedDatabase))
        try walBefore.write(to: URL(fileURLWithPath: copiedDatabase + "-wal"))

        let b = try server.makeClient("b", storage: copy, durability: .relaxed)
        let reopened = try b.client.document(forJWT: try server.token(documentID: "doc-new", userID: "alice"))
        #expect(try reopened.store.pendingCount() == 0)
        try syncUntilClean(b, reopened)
        // The server's copy came back; nothing was sent twice or reported as a conflict.
        #expect(rejections(b).isEmpty, "\(rejections(b))")
        #expect(try JSONValue.parse(try reopened.annotation(id: id))["note"] == .string("v1"))
        #expect(try history("doc-new", id).count == 1)
        _ = try reopened.updateAnnotation(json: TestServer.note("v2", id: id))
        try syncUntilClean(b, reopened)
        #expect(try server.serverAnnotations(documentID: "doc-new")[id]?["note"] == .string("v2"))
        try b.client.shutdown()
    }
}
