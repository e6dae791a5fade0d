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

    /// Replaces the server side of the store with a full snapshot given at once (see
    /// ``finishSnapshot(epoch:revision:reportChanges:)``; downloads stage page by page instead).
    /// - Parameters:
    ///   - records: The snapshot (later records may carry tombstones; the highest revision wins).
    ///   - epoch: The layer epoch.
    ///   - revision: The layer revision the snapshot is complete up to.
    /// - Returns: What changed locally.
    /// - Throws: `.databaseAccessFailed`.
    func applySnapshot(_ records: [ServerRecord], epoch: String, revision: Int64) throws(LayerSyncError) -> ServerChangeOutcome {
        try beginSnapshot()
        try stageSnapshotPage(records)
        return try finishSnapshot(epoch: epoch, revision: revision, reportChanges: true)
    }

    /// Starts staging a snapshot: empties `snapshot_staging` (left over from an interrupted download).
    /// - Throws: `.databaseAccessFailed`.
    func beginSnapshot() throws(LayerSyncError) {
        _ = try withDatabase { db throws(LayerSyncError) in
            try db.query("DELETE FROM snapshot_staging")
        }
    }

    /// Stages one page of a snapshot (one transaction; nothing visible changes, so memory is
    /// bounded by a page). A record seen again keeps its highest revision and its first position.
    /// - Parameter records: The page's records.
    /// - Throws: `.databaseAccessFailed`.
    func stageSnapshotPage(_ records: [ServerRecord]) throws(LayerSyncError) {
        try withDatabase { db throws(LayerSyncError) in
            try db.transaction { () throws(LayerSyncError) in
                for record in records {
                    let content = record.contentText
                    try db.query("""
                        INSERT INTO snapshot_staging(id, revision, content, deleted) VALUES (?, ?, ?, ?)
                        ON CONFLICT(id) DO UPDATE SET revision = excluded.revision, content = excluded.content,
                            deleted = excluded.deleted WHERE excluded.revision > snapshot_staging.revision
                        """, [.text(record.id), .integer(record.revision), content.map { .text($0) } ?? .null,
                              .integer(record.deleted || content == nil ? 1 : 0)])
                }
            }
        }
    }

    /// Replaces the server side of the store with the staged snapshot (first download, or a
    /// new layer epoch) in one transaction, which also marks the layer downloaded — so a
    /// layer is downloaded with all its records or not at all — and re-bases queued local
    /// changes onto it (ARCHITECTURE.md §4 rule 7): records with queued changes keep their
    /// local content and get one fresh, unsent change computed against the snapshot (create
    /// if the server lacks the record, else update or delete); every other record takes the
    /// snapshot's version. Runs in SQL, so memory does not grow with the layer.
    /// - Parameters:
    ///   - epoch: The layer epoch.
    ///   - revision: The layer revision the snapshot is complete up to.
    ///   - reportChanges: Whether to list the visible changes in the outcome (not needed for
    ///     a first download, where every record is new).
    /// - Returns: What changed locally.
    /// - Throws: `.databaseAccessFailed`.
    func finishSnapshot(epoch: String, revision: Int64, reportChanges: Bool) throws(LayerSyncError) -> ServerChangeOutcome {
        try transaction { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            let notPending = "NOT EXISTS (SELECT 1 FROM pending_changes p WHERE p.record_id = r.id)"
            if reportChanges {
                for row in try db.query("""
                    SELECT r.id, r.content IS NOT NULL, s.content IS NOT NULL, r.content IS s.content
                    FROM records r LEFT JOIN snapshot_staging s ON s.id = r.id WHERE \(notPending) ORDER BY r.rowid
                    """) {
                    guard let id = row[0].text else { continue }
                    switch (row[1].integer == 1, row[2].integer == 1) {
                    case (false, true): outcome.changes.created.append(id)
                    case (true, false): outcome.changes.deleted.append(id)
                    case (true, true) where row[3].integer != 1: outcome.changes.updated.append(id)
                    default: break
                    }
                }
                outcome.changes.created += try db.query("""
                    SELECT s.id FROM snapshot_staging s WHERE s.content IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM records r WHERE r.id = s.id) ORDER BY s.rowid
                    """).compactMap { $0.first?.text }
            }
            // Records without queued changes take the snapshot's version (or go when it lacks them).
            try db.query("DELETE FROM records AS r WHERE \(notPending) AND NOT EXISTS (SELECT 1 FROM snapshot_staging s WHERE s.id = r.id)")
            try db.query("""
                UPDATE records AS r SET content = s.content, server_revision = s.revision, server_content = s.content,
                    server_deleted = s.deleted
                FROM snapshot_staging s WHERE s.id = r.id AND \(notPending)
                """)
            // Records with queued changes keep their content; only their server version changes.
            try db.query("""
                UPDATE records AS r SET
                    server_revision = (SELECT s.revision FROM snapshot_staging s WHERE s.id = r.id),
                    server_content = (SELECT s.content FROM snapshot_staging s WHERE s.id = r.id),
                    server_deleted = coalesce((SELECT s.deleted FROM snapshot_staging s WHERE s.id = r.id), 0)
                WHERE NOT \(notPending)
                """)
            try db.query("""
                INSERT INTO records(id, content, server_revision, server_content, server_deleted)
                SELECT s.id, s.content, s.revision, s.content, s.deleted FROM snapshot_staging s
                WHERE NOT EXISTS (SELECT 1 FROM records r WHERE r.id = s.id) ORDER BY s.rowid
                """)
            let pendingIDs = try db.query("SELECT DISTINCT record_id FROM pending_changes ORDER BY record_id").compactMap { $0.first?.text }
            for id in pendingIDs {
                let local = try db.query("SELECT content FROM records WHERE id = ?", [.text(id)]).first?.first?.text
                try db.query("DELETE FROM pending_changes WHERE record_id = ?", [.text(id)])
                let serverLive = try db.query("SELECT deleted FROM snapshot_staging WHERE id = ?", [.text(id)]).first?.first?.integer == 0
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
            try db.query("DELETE FROM snapshot_staging")
            try Self.indexStaleRecords(db)
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

    /// Whether the record exists only locally: created here and never confirmed by the server
    /// (a row with `server_revision` NULL). The server does not manage such a record yet.
    /// - Parameter id: The record id.
    /// - Returns: `true` for a local-only record; `false` for one the server confirmed or an unknown id.
    /// - Throws: `.databaseAccessFailed`, `.invalidState` after storage removal.
    func isLocalOnly(id: String) throws(LayerSyncError) -> Bool {
        try withDatabase { db throws(LayerSyncError) in
            guard let row = try db.query("SELECT server_revision FROM records WHERE id = ?", [.text(id)]).first else { return false }
            return row[0].integer == nil
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
