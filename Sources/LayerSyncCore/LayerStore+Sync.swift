/// The store's side of the sync cycle: freezing outgoing changes, applying the server's
/// answers, and re-basing on a new snapshot.
extension LayerStore {
    /// Takes the next changes to send, in queue order, at most one per record (a record's
    /// later change waits until its earlier one is resolved, so its `base_revision` is known).
    /// Each not-yet-sent change is frozen here: its payload is computed with the record's
    /// current server revision as `base_revision` and never changes again.
    /// - Parameters:
    ///   - maxBytes: Budget for the summed payload sizes (a first change that fits
    ///     `maxChangeBytes` is always taken, so the queue always moves).
    ///   - maxChangeBytes: Size a single change may never exceed (the server's limit);
    ///     defaults to `maxBytes`.
    ///   - maxCount: Maximum number of changes.
    /// - Returns: The batch, and changes that alone exceed `maxChangeBytes` (not frozen).
    /// - Throws: `.databaseAccessFailed`.
    func nextBatch(maxBytes: Int, maxChangeBytes: Int? = nil, maxCount: Int = 500) throws(LayerSyncError) -> (batch: [PendingChange], oversized: [PendingChange]) {
        try transaction { db throws(LayerSyncError) in
            let rows = try db.query("""
                SELECT p.seq, p.change_id, p.record_id, p.op, p.content, p.attempted, p.payload, r.server_revision
                FROM pending_changes p LEFT JOIN records r ON r.id = p.record_id ORDER BY p.seq
                """)
            var seen: Set<String> = []
            var batch: [PendingChange] = []
            var oversized: [PendingChange] = []
            var bytes = 0
            for row in rows {
                guard let sequence = row[0].integer, let changeID = row[1].text, let recordID = row[2].text,
                      let operation = row[3].text.flatMap(PendingChange.Operation.init(rawValue:)) else { continue }
                guard seen.insert(recordID).inserted else { continue }
                let frozen = row[5].integer == 1 ? row[6].text : nil
                let base = row[7].integer
                let payload = frozen ?? Self.changePayload(changeID: changeID, recordID: recordID, operation: operation,
                                                          content: row[4].text, baseRevision: base)
                let change = PendingChange(sequence: sequence, changeID: changeID, recordID: recordID,
                                           operation: operation, payload: payload)
                if payload.utf8.count > (maxChangeBytes ?? maxBytes) {
                    oversized.append(change)
                    continue
                }
                guard bytes + payload.utf8.count + 1 <= maxBytes || batch.isEmpty, batch.count < maxCount else { break }
                if frozen == nil {
                    try db.query("UPDATE pending_changes SET attempted = 1, payload = ?, base_revision = ? WHERE seq = ?",
                                 [.text(payload), base.map { .integer($0) } ?? .null, .integer(sequence)])
                }
                bytes += payload.utf8.count + 1
                batch.append(change)
            }
            return (batch, oversized)
        }
    }

    /// The JSON of one change in a sync request (protocol.md `changes[]`).
    static func changePayload(changeID: String, recordID: String, operation: PendingChange.Operation,
                              content: String?, baseRevision: Int64?) -> String {
        var change = JSONObject([("change_id", .string(changeID)), ("op", .string(operation.rawValue)), ("id", .string(recordID))])
        if operation != .create { change["base_revision"] = .integer(baseRevision ?? 0) }
        if operation != .delete, let content { change["content"] = (try? JSONValue.parse(content)) ?? .null }
        return JSONValue.object(change).jsonText
    }

    /// Drops a change that can never be sent (over the server's size limit) and reverts
    /// its record to the last known server version.
    /// - Parameters:
    ///   - change: The change.
    ///   - reason: The rejection reason to report.
    /// - Returns: What changed locally, including the rejection report.
    /// - Throws: `.databaseAccessFailed`.
    func dropChange(_ change: PendingChange, reason: String) throws(LayerSyncError) -> ServerChangeOutcome {
        try transaction { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            let local = try db.query("SELECT content FROM pending_changes WHERE seq = ?", [.integer(change.sequence)]).first?.first?.text
            let server = try Self.serverVersion(db, id: change.recordID)
            outcome.rejections.append(RejectedChange(recordID: change.recordID, reason: reason, localJSON: local,
                                                     serverJSON: server?.contentText))
            try db.query("DELETE FROM pending_changes WHERE record_id = ?", [.text(change.recordID)])
            try Self.adopt(db, id: change.recordID, server: server, into: &outcome)
            return outcome
        }
    }

    /// An accepted change from a sync answer.
    struct AcceptedChange: Sendable {
        var changeID: String
        var recordID: String
        var revision: Int64
    }

    /// A rejected change from a sync answer.
    struct RejectedChangeAnswer: Sendable {
        var changeID: String
        var recordID: String
        var reason: String
        var serverRecord: ServerRecord?
    }

    /// Applies the `accepted` and `rejected` lists of a sync answer.
    /// Accepted: the change leaves the queue and the record's server version becomes the
    /// sent content at the new revision — unless a newer server version arrived meanwhile,
    /// which then stands. Rejected: reported with both versions, every queued change of the
    /// record is dropped, and the server version is adopted (first writer wins).
    /// - Parameters:
    ///   - accepted: Accepted changes.
    ///   - rejected: Rejected changes.
    /// - Returns: What changed locally.
    /// - Throws: `.databaseAccessFailed`.
    func applyAnswers(accepted: [AcceptedChange], rejected: [RejectedChangeAnswer]) throws(LayerSyncError) -> ServerChangeOutcome {
        try transaction { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            for answer in accepted {
                guard let row = try db.query("SELECT seq, op, content FROM pending_changes WHERE change_id = ?",
                                             [.text(answer.changeID)]).first,
                      let sequence = row[0].integer else { continue }
                try db.query("DELETE FROM pending_changes WHERE seq = ?", [.integer(sequence)])
                let isDelete = row[1].text == "delete"
                let known = try db.query("SELECT server_revision FROM records WHERE id = ?", [.text(answer.recordID)]).first?.first?.integer
                if let known, known > answer.revision {
                    // A newer server version (another writer, after ours) is already known: it stands.
                    let laterPending = try !db.query("SELECT 1 FROM pending_changes WHERE record_id = ?", [.text(answer.recordID)]).isEmpty
                    if !laterPending {
                        try Self.adopt(db, id: answer.recordID, server: try Self.serverVersion(db, id: answer.recordID), into: &outcome)
                    }
                    continue
                }
                try db.query("UPDATE records SET server_revision = ?, server_content = ?, server_deleted = ? WHERE id = ?",
                             [.integer(answer.revision), isDelete ? .null : (row[2].text.map { .text($0) } ?? .null),
                              .integer(isDelete ? 1 : 0), .text(answer.recordID)])
            }
            for answer in rejected {
                guard let row = try db.query("SELECT content FROM pending_changes WHERE change_id = ?",
                                             [.text(answer.changeID)]).first else { continue }
                outcome.rejections.append(RejectedChange(recordID: answer.recordID, reason: answer.reason,
                                                         localJSON: row[0].text, serverJSON: answer.serverRecord?.contentText))
                try db.query("DELETE FROM pending_changes WHERE record_id = ?", [.text(answer.recordID)])
                try Self.adopt(db, id: answer.recordID, server: answer.serverRecord, into: &outcome)
            }
            return outcome
        }
    }

    /// Applies server records (sync `changes`, delta pages, long-poll answers) and raises
    /// `since`. Records at or below the locally known revision are skipped. A record with a
    /// queued change that was never sent: the local change loses (reported as `superseded`
    /// with both versions). A record with a sent, unanswered change: only its server version
    /// is recorded; the answer to the retried change id decides (see ``applyAnswers``).
    /// - Parameters:
    ///   - records: The records, in revision order.
    ///   - since: The revision to raise `since` to afterwards, if any.
    /// - Returns: What changed locally.
    /// - Throws: `.databaseAccessFailed`.
    func applyServerRecords(_ records: [ServerRecord], since: Int64?) throws(LayerSyncError) -> ServerChangeOutcome {
        try transaction { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            for record in records {
                let row = try db.query("SELECT server_revision FROM records WHERE id = ?", [.text(record.id)]).first
                if let known = row?[0].integer, record.revision <= known { continue }
                let pending = try db.query("SELECT attempted, content FROM pending_changes WHERE record_id = ? ORDER BY seq",
                                           [.text(record.id)])
                if pending.contains(where: { $0[0].integer == 1 }) {
                    try db.query("UPDATE records SET server_revision = ?, server_content = ?, server_deleted = ? WHERE id = ?",
                                 [.integer(record.revision), record.contentText.map { .text($0) } ?? .null,
                                  .integer(record.deleted ? 1 : 0), .text(record.id)])
                    continue
                }
                if let last = pending.last {
                    outcome.rejections.append(RejectedChange(recordID: record.id, reason: "superseded",
                                                             localJSON: last[1].text, serverJSON: record.contentText))
                    try db.query("DELETE FROM pending_changes WHERE record_id = ?", [.text(record.id)])
                }
                try Self.adopt(db, id: record.id, server: record, into: &outcome)
            }
            if let since { try Self.advanceSince(db, to: since) }
            return outcome
        }
    }

    /// Replaces the server side of the store with a full snapshot (first download, or a new
    /// layer epoch) and re-bases queued local changes onto it (ARCHITECTURE.md §4 rule 7):
    /// records with queued changes keep their local content and get one fresh, unsent change
    /// computed against the snapshot (create if the server lacks the record, else update or
    /// delete); every other record takes the snapshot's version.
    /// - Parameters:
    ///   - records: The snapshot (later pages may carry tombstones; the highest revision wins).
    ///   - epoch: The layer epoch.
    ///   - revision: The layer revision the snapshot is complete up to.
    /// - Returns: What changed locally.
    /// - Throws: `.databaseAccessFailed`.
    func applySnapshot(_ records: [ServerRecord], epoch: String, revision: Int64) throws(LayerSyncError) -> ServerChangeOutcome {
        var latest: [String: ServerRecord] = [:]
        var order: [String] = []
        for record in records {
            if let existing = latest[record.id] {
                if record.revision > existing.revision { latest[record.id] = record }
            } else {
                latest[record.id] = record
                order.append(record.id)
            }
        }
        return try transaction { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            let pendingIDs = Set(try db.query("SELECT DISTINCT record_id FROM pending_changes").compactMap { $0.first?.text })
            let localIDs = try db.query("SELECT id FROM records ORDER BY rowid").compactMap { $0.first?.text }
            for id in localIDs {
                let server = latest[id]
                if pendingIDs.contains(id) {
                    try Self.setServerVersion(db, id: id, server: server)
                } else {
                    try Self.adopt(db, id: id, server: server, into: &outcome)
                }
            }
            let known = Set(localIDs)
            for id in order where !known.contains(id) {
                try Self.adopt(db, id: id, server: latest[id], into: &outcome)
            }
            for id in pendingIDs.sorted() {
                let local = try db.query("SELECT content FROM records WHERE id = ?", [.text(id)]).first?.first?.text
                try db.query("DELETE FROM pending_changes WHERE record_id = ?", [.text(id)])
                let serverLive = latest[id].map { !$0.deleted } ?? false
                let operation: PendingChange.Operation
                switch (local, serverLive) {
                case (nil, true): operation = .delete
                case (nil, false):
                    try db.query("DELETE FROM records WHERE id = ? AND server_revision IS NULL", [.text(id)])
                    continue
                case (_?, true): operation = .update
                case (_?, false): operation = .create
                }
                try db.query("INSERT INTO pending_changes(change_id, record_id, op, content) VALUES (?, ?, ?, ?)",
                             [.text(ULID.generate()), .text(id), .text(operation.rawValue), local.map { .text($0) } ?? .null])
                outcome.rebased.append(id)
            }
            try Self.setMeta(db, "epoch", epoch)
            try Self.setMeta(db, "since", String(revision))
            try Self.setMeta(db, "downloaded", "1")
            return outcome
        }
    }

    /// The last server revision this store knows for a record, `nil` if none.
    func knownServerRevision(id: String) throws(LayerSyncError) -> Int64? {
        try withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT server_revision FROM records WHERE id = ?", [.text(id)]).first?.first?.integer
        }
    }

    // MARK: Helpers (inside a transaction)

    /// The last known server version of a record, `nil` if the server has never confirmed it.
    static func serverVersion(_ db: SQLiteDatabase, id: String) throws(LayerSyncError) -> ServerRecord? {
        guard let row = try db.query("SELECT server_revision, server_content, server_deleted FROM records WHERE id = ?",
                                     [.text(id)]).first,
              let revision = row[0].integer else { return nil }
        let deleted = row[2].integer == 1
        let content = deleted ? nil : row[1].text.flatMap { try? JSONValue.parse($0) }
        return ServerRecord(id: id, revision: revision, deleted: deleted || content == nil, content: content)
    }

    /// Records `server` as the record's server version without touching local content.
    static func setServerVersion(_ db: SQLiteDatabase, id: String, server: ServerRecord?) throws(LayerSyncError) {
        try db.query("UPDATE records SET server_revision = ?, server_content = ?, server_deleted = ? WHERE id = ?",
                     [server.map { .integer($0.revision) } ?? .null, server?.contentText.map { .text($0) } ?? .null,
                      .integer(server?.deleted == true ? 1 : 0), .text(id)])
    }

    /// Makes the server version the local one and notes the visible difference in `outcome`.
    /// `nil` means the server has no such record: the local row is removed.
    static func adopt(_ db: SQLiteDatabase, id: String, server: ServerRecord?,
                      into outcome: inout ServerChangeOutcome) throws(LayerSyncError) {
        let row = try db.query("SELECT content FROM records WHERE id = ?", [.text(id)]).first
        let oldContent = row?[0].text
        let newContent = server?.contentText
        if let server {
            if row == nil {
                try db.query("INSERT INTO records(id, content, server_revision, server_content, server_deleted) VALUES (?, ?, ?, ?, ?)",
                             [.text(id), newContent.map { .text($0) } ?? .null, .integer(server.revision),
                              newContent.map { .text($0) } ?? .null, .integer(server.deleted ? 1 : 0)])
            } else {
                try db.query("UPDATE records SET content = ?, server_revision = ?, server_content = ?, server_deleted = ? WHERE id = ?",
                             [newContent.map { .text($0) } ?? .null, .integer(server.revision),
                              newContent.map { .text($0) } ?? .null, .integer(server.deleted ? 1 : 0), .text(id)])
            }
        } else if row != nil {
            try db.query("DELETE FROM records WHERE id = ?", [.text(id)])
        }
        switch (oldContent, newContent) {
        case (nil, _?): outcome.changes.created.append(id)
        case (_?, nil): outcome.changes.deleted.append(id)
        case (let old?, let new?) where old != new: outcome.changes.updated.append(id)
        default: break
        }
    }
}
