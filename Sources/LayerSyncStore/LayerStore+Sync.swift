import LayerSyncModel

/// The store's side of the sync cycle: freezing outgoing changes, applying the server's
/// answers, and re-basing on a new snapshot.
extension LayerStore {
    /// A batch of changes to send, and the changes that can never be sent (each alone over
    /// the size limit; frozen like the batch, and dropped by the sync cycle).
    package typealias Batch = (batch: [PendingChange], oversized: [PendingChange])

    /// How ``nextBatch(_:)`` fills a batch.
    package struct BatchLimits: Sendable {
        /// Budget for the summed payload sizes (a first change that fits `maxChangeBytes`
        /// is always taken, so the queue always moves).
        var maxBytes: Int
        /// Size a single change may never exceed (the server's limit).
        var maxChangeBytes: Int
        /// Maximum number of changes.
        var maxCount: Int = LayerStore.defaultBatchCount
        /// Queue positions of changes in a request still in flight: skipped, together with
        /// every later change of their records.
        var inFlight: Set<Int64> = []
        /// The records of the changes in `inFlight`, when known (then the scan reads no record
        /// id of an in-flight row); `nil` to read them from the rows.
        var inFlightRecords: Set<String>?

        init(maxBytes: Int, maxChangeBytes: Int? = nil, maxCount: Int = LayerStore.defaultBatchCount,
             inFlight: Set<Int64> = []) {
            self.maxBytes = maxBytes
            self.maxChangeBytes = maxChangeBytes ?? maxBytes
            self.maxCount = maxCount
            self.inFlight = inFlight
        }

        /// Limits with the changes of a request in flight given as they were sent.
        package init(maxBytes: Int, maxChangeBytes: Int? = nil, maxCount: Int = LayerStore.defaultBatchCount,
             inFlight changes: [PendingChange]) {
            self.init(maxBytes: maxBytes, maxChangeBytes: maxChangeBytes, maxCount: maxCount,
                      inFlight: Set(changes.map(\.sequence)))
            inFlightRecords = Set(changes.map(\.recordID))
        }
    }

    /// Most changes one request carries by default. Both ends pay per change rather than per
    /// request, so beyond this a batch only delays the first answer (and, with the sync
    /// cycle's pipelining, the overlap of one side's work with the other's).
    static let defaultBatchCount = 1000

    /// Takes the next changes to send, in queue order, at most one per record (a record's
    /// later change waits until its earlier one is resolved, so its `base_revision` is known).
    /// Each not-yet-sent change is frozen here (`attempted` = 1): its `base_revision` is the
    /// record's current server revision and, like the rest of the row, never changes again,
    /// so the change's payload (a function of those fields) goes out byte-identical on every
    /// retry. The freeze commits `.relaxed` (no fsync); ``sealPendingChanges(_:)`` makes that
    /// safe after a power loss. But when an API write committed `.relaxed`
    /// (``localWriteDurability``) rewrote a queued change in place and no FULL commit has made
    /// it durable since, the freeze commits `.full`: that content must be on disk before it is
    /// sent, or a power loss could leave the change with older content under a change id the
    /// server applied with newer content (docs/durability.md).
    /// - Parameters:
    ///   - maxBytes: Budget for the summed payload sizes (a first change that fits
    ///     `maxChangeBytes` is always taken, so the queue always moves).
    ///   - maxChangeBytes: Size a single change may never exceed (the server's limit);
    ///     defaults to `maxBytes`.
    ///   - maxCount: Maximum number of changes.
    /// - Returns: The batch, and changes that alone exceed `maxChangeBytes` (frozen too, so that
    ///   an edit made before they are dropped gets a row of its own behind them).
    /// - Throws: `.databaseAccessFailed`.
    func nextBatch(maxBytes: Int, maxChangeBytes: Int? = nil, maxCount: Int = defaultBatchCount) throws(LayerSyncError) -> Batch {
        try nextBatch(BatchLimits(maxBytes: maxBytes, maxChangeBytes: maxChangeBytes, maxCount: maxCount))
    }

    /// ``nextBatch(maxBytes:maxChangeBytes:maxCount:)`` with all limits, in its own transaction.
    package func nextBatch(_ limits: BatchLimits) throws(LayerSyncError) -> Batch {
        try localEdit(.relaxed, freezing: true) { db throws(LayerSyncError) in (try Self.takeBatch(db, limits), pendingDelta: 0) }
    }

    /// The body of ``nextBatch(_:)`` (inside a transaction).
    static func takeBatch(_ db: SQLiteDatabase, _ limits: BatchLimits) throws(LayerSyncError) -> Batch {
        var seen: Set<String> = limits.inFlightRecords ?? []
        seen.reserveCapacity(seen.count + min(limits.maxCount, 4096))
        var batch: [PendingChange] = []
        var oversized: [PendingChange] = []
        var toFreeze: [(sequence: Int64, base: Int64?)] = []
        var bytes = 0
        // Rows are read one at a time (columns on demand) and the scan stops when the batch
        // is full, so a batch costs what it holds, not the length of the queue. The record's
        // server revision (the base) is looked up only for a change not frozen yet (an in-flight
        // one is) that has a base: a create's payload has none, and it is frozen without one.
        try db.forEachRow("""
            SELECT p.seq, p.record_id, p.change_id, p.op, p.attempted, p.payload, p.base_revision,
                CASE WHEN p.attempted = 1 OR p.op = 'create' THEN NULL ELSE (SELECT r.server_revision FROM records r WHERE r.id = p.record_id) END,
                p.content, p.grp_given, p.grp
            FROM pending_changes p ORDER BY p.seq
            """) { row throws(LayerSyncError) in
            guard let sequence = row.integer(0) else { return true }
            if limits.inFlight.contains(sequence) {
                if limits.inFlightRecords == nil, let recordID = row.text(1) { seen.insert(recordID) }
                return true
            }
            guard let recordID = row.text(1), seen.insert(recordID).inserted else { return true }
            guard let changeID = row.text(2), let operation = row.text(3).flatMap(PendingChange.Operation.init(rawValue:)) else {
                return true
            }
            let attempted = row.integer(4) == 1
            let base = attempted ? row.integer(6) : row.integer(7)
            // Earlier versions stored the payload of a sent change (column `payload`); it is now
            // recomputed from the row, whose fields never change once it was sent.
            let stored = attempted ? row.text(5) : nil
            let (payload, contentRange) = stored.map { ($0, nil) } ?? row.withText(8) { content in
                changePayload(changeID: changeID, recordID: recordID, operation: operation,
                              content: row.isNull(8) ? nil : content, baseRevision: base,
                              group: row.integer(9) == 1 ? .some(row.text(10)) : nil)
            }
            let size = payload.utf8.count
            let change = PendingChange(sequence: sequence, changeID: changeID, recordID: recordID,
                                       operation: operation, payload: payload, contentRange: contentRange)
            if size > limits.maxChangeBytes {
                // Frozen too: it is dropped later (after a request in flight ended), and an edit
                // made meanwhile must get a row of its own behind it, not be dropped with it.
                if !attempted { toFreeze.append((sequence, base)) }
                oversized.append(change)
                return true
            }
            guard bytes + size + 1 <= limits.maxBytes || batch.isEmpty, batch.count < limits.maxCount else { return false }
            if !attempted { toFreeze.append((sequence, base)) }
            bytes += size + 1
            batch.append(change)
            return true
        }
        for change in toFreeze {
            try db.query("UPDATE pending_changes SET attempted = 1, base_revision = ? WHERE seq = ?",
                         [change.base.map { .integer($0) } ?? .null, .integer(change.sequence)])
        }
        return (batch, oversized)
    }

    /// Seals every unfrozen change in one `.full` transaction, as if each had possibly been
    /// sent: called when the store opens, before any sync. ``takeBatch(_:_:)`` freezes in a
    /// `.relaxed` transaction, which a power loss can undo after the request reached the server;
    /// without this a later local edit would coalesce into the row and go out under a change id
    /// the server has already applied (it would answer with the recorded outcome and the edit
    /// would be lost). A later edit of a sealed record gets a row of its own.
    ///
    /// The first queued change of a record is frozen exactly as ``takeBatch(_:_:)`` would have
    /// frozen it (`attempted` = 1, `base_revision` = the record's server revision, which cannot
    /// have changed since: a server version arriving for a record with an unsent change
    /// supersedes the change; none for a create, whose payload has no base). A change queued behind another one of its record can only have
    /// been sent after that one was resolved — by then with a base revision not known here — so
    /// it is sealed without a base (`attempted` = 2: never coalesced into, frozen with its base
    /// when its turn comes, like an unsent change; see ``PendingChange``).
    /// - Parameter db: The connection (outside a transaction).
    /// - Throws: `.databaseAccessFailed`.
    static func sealPendingChanges(_ db: SQLiteDatabase) throws(LayerSyncError) {
        // A store in an older content format was last written by a library that froze with an
        // fsync, and nothing is sent before ``migrateContent()`` rewrote its unsent changes:
        // there is nothing to seal (and sealing would keep them from being migrated).
        if let version = try meta(db, "content_version").flatMap({ Int($0) }), version < contentVersion { return }
        guard try !db.query("SELECT 1 FROM pending_changes WHERE attempted = 0 LIMIT 1").isEmpty else { return }
        try db.transaction(.full) { () throws(LayerSyncError) in
            try db.query("""
                UPDATE pending_changes AS p SET attempted = 1, base_revision = CASE WHEN p.op = 'create' THEN NULL
                    ELSE (SELECT r.server_revision FROM records r WHERE r.id = p.record_id) END
                WHERE p.attempted = 0
                    AND NOT EXISTS (SELECT 1 FROM pending_changes q WHERE q.record_id = p.record_id AND q.seq < p.seq)
                """)
            try db.query("UPDATE pending_changes SET attempted = 2 WHERE attempted = 0")
        }
    }

    /// The JSON of one change in a sync request (protocol.md `changes[]`):
    /// `{"change_id","op","id"[,"base_revision"][,"content"]}`. Stored content (UTF-8 bytes,
    /// `nil` for none) that is valid JSON goes in as it is — the engine stores compact JSON, so
    /// this is what parsing and re-writing it would give, without the cost; anything else is
    /// sent as `null`, which the server rejects for this change alone.
    /// - Returns: The payload, and where the stored content is in it (UTF-8 offsets; `nil` when
    ///   it is not there as stored).
    ///   `group`: the change's `"group"` (protocol.md: a sibling of `content`), `nil` for none.
    static func changePayload(changeID: String, recordID: String, operation: PendingChange.Operation,
                              content: UnsafeBufferPointer<UInt8>?, baseRevision: Int64?,
                              group: String?? = nil) -> (String, Range<Int>?) {
        var contentRange: Range<Int>?
        var output: [UInt8] = []
        output.reserveCapacity(96 + changeID.utf8.count + recordID.utf8.count + (content?.count ?? 0))
        output.append(contentsOf: #"{"change_id":"#.utf8)
        JSONValue.string(changeID).write(to: &output)
        output.append(contentsOf: #","op":""#.utf8)
        output.append(contentsOf: operation.rawValue.utf8)
        output.append(contentsOf: #"","id":"#.utf8)
        JSONValue.string(recordID).write(to: &output)
        if operation != .create {
            output.append(contentsOf: #","base_revision":"#.utf8)
            output.append(contentsOf: String(baseRevision ?? 0).utf8)
        }
        if operation != .delete, let content {
            output.append(contentsOf: #","content":"#.utf8)
            if JSONValue.isValid(bytes: content) {
                contentRange = output.count..<output.count + content.count
                output.append(contentsOf: content)
            } else {
                output.append(contentsOf: "null".utf8)
            }
        }
        if operation != .delete, let group {
            output.append(contentsOf: #","group":"#.utf8)
            (group.map(JSONValue.string) ?? .null).write(to: &output)
        }
        output.append(UInt8(ascii: "}"))
        let payload = String(decoding: output, as: UTF8.self)
        // Bytes that are not UTF-8 were replaced, and the offsets no longer hold.
        return (payload, payload.utf8.count == output.count ? contentRange : nil)
    }

    /// Drops a change that can never be sent (over the server's size limit), alone
    /// (docs/rules.md rule 5), and reports it with the version it carried.
    ///
    /// Later edits of the record, made while the change was in flight and queued behind it,
    /// stay queued and are sent in its place: they are the user's newest version (often the
    /// fix of what was too large). When the dropped change was a create, which never reached
    /// the server, the next of them becomes the create (a delete behind it has nothing left to
    /// delete and goes too). No change behind a queued one has ever been sent (it waits until
    /// that one is resolved), so rewriting it is safe. Only when nothing of the record is left
    /// queued does the record revert to the last known server version.
    /// - Parameters:
    ///   - change: The change.
    ///   - reason: The rejection reason to report.
    /// - Returns: What changed locally, including the rejection report.
    /// - Throws: `.databaseAccessFailed`.
    package func dropChange(_ change: PendingChange, reason: String) throws(LayerSyncError) -> ServerChangeOutcome {
        try transaction(.relaxed) { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            _ = try Self.dropAlone(db, sequence: change.sequence, changeID: change.changeID, recordID: change.recordID,
                                   reason: reason, into: &outcome)
            return outcome
        }
    }

    /// The body of ``dropChange(_:reason:)`` (inside a transaction), also used for a change the
    /// server rejected as `invalid`: a change of its own record queued behind it may be its fix.
    /// - Returns: How many rows left `pending_changes`, or `nil` when the change is no longer
    ///   queued (re-based, superseded: the record's rows, if any, are not behind it), which
    ///   changes nothing.
    static func dropAlone(_ db: SQLiteDatabase, sequence: Int64, changeID: String, recordID: String, reason: String,
                          into outcome: inout ServerChangeOutcome) throws(LayerSyncError) -> Int? {
        guard let row = try db.query("SELECT content, op FROM pending_changes WHERE seq = ? AND change_id = ?",
                                     [.integer(sequence), .text(changeID)]).first else { return nil }
        let server = try serverVersion(db, id: recordID)
        try recordRejection(db, changeID: changeID, recordID: recordID, reason: reason, localJSON: row[0].text,
                            serverJSON: server?.contentText, into: &outcome)
        try db.query("DELETE FROM pending_changes WHERE seq = ?", [.integer(sequence)])
        var removed = 1
        var behind = try db.query("SELECT seq, op FROM pending_changes WHERE record_id = ? ORDER BY seq", [.text(recordID)])
        if row[1].text == PendingChange.Operation.create.rawValue {
            while let next = behind.first, next[1].text == PendingChange.Operation.delete.rawValue, let seq = next[0].integer {
                try db.query("DELETE FROM pending_changes WHERE seq = ?", [.integer(seq)])
                removed += 1
                behind.removeFirst()
            }
            if let next = behind.first, next[1].text == PendingChange.Operation.update.rawValue, let seq = next[0].integer {
                try db.query("UPDATE pending_changes SET op = 'create', base_revision = NULL WHERE seq = ?", [.integer(seq)])
            }
        }
        if behind.isEmpty { try adopt(db, id: recordID, server: server, into: &outcome) }
        return removed
    }

    /// Applies the `accepted` and `rejected` lists of a sync answer.
    /// Accepted: the change leaves the queue and the record's server version becomes the
    /// sent content at the new revision — unless a newer server version arrived meanwhile,
    /// which then stands. Rejected: reported with both versions, every queued change of the
    /// record is dropped, and the server version is adopted (first writer wins): the answer's,
    /// or a newer one that arrived meanwhile, which then stands too.
    /// - Parameters:
    ///   - accepted: Accepted changes.
    ///   - rejected: Rejected changes.
    ///   - sent: The changes of the request answered, as sent: a change found there is looked up
    ///     by its queue position, not by its change id (which has no index: an answer about a
    ///     change the request did not carry costs a scan of the queue).
    /// - Returns: What changed locally.
    /// - Throws: `.databaseAccessFailed`.
    func applyAnswers(accepted: [SyncAnswer.Accepted], rejected: [SyncAnswer.Rejected],
                      sent: [PendingChange]) throws(LayerSyncError) -> ServerChangeOutcome {
        try localEdit(.relaxed) { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            let removed = try Self.applyAnswers(db, accepted: accepted, rejected: rejected, sent: sent, into: &outcome)
            return (outcome, pendingDelta: -removed)
        }
    }

    /// Finds answered change ids among the changes of the request: answers list them in request
    /// order, so each is looked for right after the previous one (a rejected change in between
    /// is skipped), and through a dictionary built on the first miss.
    private struct SentChanges {
        let sent: [PendingChange]
        var next = 0
        var index: [String: Int]?

        /// The change with `changeID` if it was sent in the request, else `nil`.
        mutating func change(_ changeID: String) -> PendingChange? {
            for position in next..<min(next + 4, sent.count) where sent[position].changeID == changeID {
                next = position + 1
                return sent[position]
            }
            if index == nil {
                index = Dictionary(sent.indices.map { (sent[$0].changeID, $0) }, uniquingKeysWith: { first, _ in first })
            }
            return index?[changeID].map { sent[$0] }
        }
    }

    /// The body of ``applyAnswers(accepted:rejected:sent:)`` (inside a transaction).
    /// - Returns: How many rows left `pending_changes`.
    static func applyAnswers(_ db: SQLiteDatabase, accepted: [SyncAnswer.Accepted], rejected: [SyncAnswer.Rejected],
                             sent: [PendingChange], into outcome: inout ServerChangeOutcome) throws(LayerSyncError) -> Int {
        var removed = 0
        var lookup = SentChanges(sent: sent)
        for answer in accepted {
            // The sent content becomes the record's server version at the new revision. The row
            // is found by its queue position (its change id checked too: a row a rebase deleted is
            // skipped). A change of the request has its position and, when its payload holds the
            // row's content as stored (a frozen row never changes), its content from there; any
            // other's position is looked up by its change id (a scan) and its content copied inside
            // SQLite. (Statements that write one row by its key: SQLite needs no statement journal
            // for them, unlike an UPDATE ... FROM.)
            let change = lookup.change(answer.changeID)
            let updated: Int
            if let change, change.operation == .delete || change.contentRange != nil {
                try db.query("DELETE FROM pending_changes WHERE seq = ? AND change_id = ?",
                             [.integer(change.sequence), .text(answer.changeID)])
                guard db.changes > 0 else { continue }  // no longer queued: nothing to do
                let content: SQLiteDatabase.Value = change.operation == .delete ? .null
                    : change.contentRange.map { .textBytes(change.payload, $0) } ?? .null
                try db.query("""
                    UPDATE records SET server_revision = ?1, server_content = ?2, server_deleted = ?3,
                        server_created_by = created_by, server_updated_by = updated_by, server_grp = grp
                    WHERE id = ?4 AND (server_revision IS NULL OR server_revision <= ?1)
                    """, [.integer(answer.revision), content, .integer(change.operation == .delete ? 1 : 0), .text(answer.recordID)])
                updated = db.changes
            } else {
                guard let sequence = try queuedSequence(db, answer.changeID, sent: change) else {
                    continue  // not (or no longer) queued: nothing to do
                }
                try db.query("""
                    UPDATE records SET server_revision = ?2, server_created_by = created_by, server_updated_by = updated_by,
                        server_grp = grp, (server_content, server_deleted) = (
                        SELECT CASE op WHEN 'delete' THEN NULL ELSE content END, op = 'delete'
                        FROM pending_changes WHERE seq = ?4 AND change_id = ?1)
                    WHERE id = ?3 AND (server_revision IS NULL OR server_revision <= ?2)
                        AND EXISTS (SELECT 1 FROM pending_changes WHERE seq = ?4 AND change_id = ?1)
                    """, [.text(answer.changeID), .integer(answer.revision), .text(answer.recordID), .integer(sequence)])
                updated = db.changes
                try db.query("DELETE FROM pending_changes WHERE seq = ? AND change_id = ?",
                             [.integer(sequence), .text(answer.changeID)])
                guard db.changes > 0 else { continue }  // no longer queued: nothing to do
            }
            removed += 1
            guard updated == 0 else { continue }
            // A newer server version (another writer, after ours) is already known: it stands.
            let known = try db.query("SELECT server_revision FROM records WHERE id = ?", [.text(answer.recordID)]).first?.first?.integer
            if let known, known > answer.revision {
                let laterPending = try !db.query("SELECT 1 FROM pending_changes WHERE record_id = ?", [.text(answer.recordID)]).isEmpty
                if !laterPending {
                    try adopt(db, id: answer.recordID, server: try serverVersion(db, id: answer.recordID), into: &outcome)
                }
            }
        }
        for answer in rejected {
            guard let sequence = try queuedSequence(db, answer.changeID, sent: lookup.change(answer.changeID)) else { continue }
            if answer.reason == "invalid" {
                // Nothing to do with other writers: like a change too large, it goes alone, and an
                // edit queued behind it (often its fix) is sent in its place.
                removed += try dropAlone(db, sequence: sequence, changeID: answer.changeID, recordID: answer.recordID,
                                         reason: answer.reason, into: &outcome) ?? 0
                continue
            }
            guard try !db.query("SELECT 1 FROM pending_changes WHERE seq = ? AND change_id = ?",
                                [.integer(sequence), .text(answer.changeID)]).isEmpty,
                  let row = try db.query("SELECT content FROM pending_changes WHERE record_id = ? ORDER BY seq DESC LIMIT 1",
                                         [.text(answer.recordID)]).first
            else { continue }  // not (or no longer) queued: nothing to do
            // The winner is the newest server version known, which may be newer than the answer's:
            // the answer to a retried change id replays the outcome of its first attempt (whose
            // answer was lost), with the server version of back then, and a later version of the
            // record may have arrived meanwhile (long-poll, an earlier answer's `changes`) and
            // raised `since` past it, so it is never sent again. Adopting the older one would leave
            // the record behind the server for good.
            var server = answer.serverRecord
            if let stale = server, let known = try serverVersion(db, id: answer.recordID), known.revision > stale.revision {
                server = known
            }
            // Every queued change of the record goes (first writer wins), including edits made while
            // the rejected one was in flight: report the newest local version, not the one sent.
            try recordRejection(db, changeID: answer.changeID, recordID: answer.recordID, reason: answer.reason,
                                localJSON: row[0].text, serverJSON: server?.contentText, into: &outcome)
            try db.query("DELETE FROM pending_changes WHERE record_id = ?", [.text(answer.recordID)])
            removed += db.changes
            try adopt(db, id: answer.recordID, server: server, into: &outcome)
        }
        return removed
    }

    /// The queue position of the change `changeID`: the sent change's if the request carried it
    /// (not checked here: the statements using it match `change_id` too), else looked up, or
    /// `nil` if it is not queued. The lookup scans the queue (`change_id` has no index since
    /// schema 5).
    private static func queuedSequence(_ db: SQLiteDatabase, _ changeID: String,
                                       sent: PendingChange?) throws(LayerSyncError) -> Int64? {
        if let sent { return sent.sequence }
        return try db.query("SELECT seq FROM pending_changes WHERE change_id = ? LIMIT 1", [.text(changeID)]).first?.first?.integer
    }

    /// Applies server records (sync `changes`, delta pages, long-poll answers) and raises
    /// `since`. Records at or below the locally known revision are skipped. A record with a
    /// queued change that was never sent: the local change loses (reported as `superseded`
    /// with both versions). A record with a sent, unanswered change: only its server version
    /// is recorded; the answer to the retried change id decides (see ``applyAnswers``).
    /// - Parameters:
    ///   - records: The records, in revision order.
    ///   - since: The revision to raise `since` to afterwards, if any.
    ///   - durability: `.relaxed` (default) for records the engine fetched on its own (a lost
    ///     commit is fetched again: `since` commits with the records); ``localWriteDurability``
    ///     for the result of an API call.
    /// - Returns: What changed locally.
    /// - Throws: `.databaseAccessFailed`.
    package func applyServerRecords(_ records: [ServerRecord], since: Int64?,
                            durability: CommitDurability = .relaxed) throws(LayerSyncError) -> ServerChangeOutcome {
        try localEdit(durability) { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            let removed = try Self.applyServerRecords(db, records, since: since, into: &outcome)
            return (outcome, pendingDelta: -removed)
        }
    }

    /// The body of ``applyServerRecords(_:since:)`` (inside a transaction).
    /// - Returns: How many rows left `pending_changes`.
    static func applyServerRecords(_ db: SQLiteDatabase, _ records: [ServerRecord], since: Int64?,
                                   into outcome: inout ServerChangeOutcome) throws(LayerSyncError) -> Int {
        var removed = 0
        for record in records {
            let row = try db.query("SELECT server_revision FROM records WHERE id = ?", [.text(record.id)]).first
            if let known = row?[0].integer, record.revision <= known { continue }
            let pending = try db.query("SELECT attempted, content, change_id FROM pending_changes WHERE record_id = ? ORDER BY seq",
                                       [.text(record.id)])
            if pending.contains(where: { $0[0].integer == 1 }) {
                try setServerVersion(db, id: record.id, server: record)
                continue
            }
            if let last = pending.last {
                try recordRejection(db, changeID: last[2].text, recordID: record.id, reason: "superseded",
                                    localJSON: last[1].text, serverJSON: record.contentText, into: &outcome)
                try db.query("DELETE FROM pending_changes WHERE record_id = ?", [.text(record.id)])
                removed += db.changes
            }
            try adopt(db, id: record.id, server: record, into: &outcome)
        }
        if let since { try advanceSince(db, to: since) }
        return removed
    }

    /// What ``applySyncAnswer(_:sent:since:lastSyncTime:next:)`` did.
    package struct SyncRound: Sendable {
        /// What changed locally.
        package var outcome: ServerChangeOutcome
        /// Queued changes and attachments left afterwards.
        package var pending: Int
        /// The next batch, frozen in the same transaction (when asked for and anything is left).
        package var next: Batch?
        /// Whether `lastSyncTime` was stored.
        package var storedSyncTime: Bool
    }

    /// One round of the sync cycle in one transaction (one commit): applies a sync answer's
    /// `accepted`, `rejected` and `changes` (``applyAnswers(accepted:rejected:sent:)``,
    /// ``applyServerRecords(_:since:)``), stores `lastSyncTime` when nothing is left to send,
    /// and otherwise freezes the next batch (``nextBatch(_:)``).
    /// - Parameters:
    ///   - answer: The sync answer.
    ///   - sent: The changes of the request answered, as sent (see ``applyAnswers(accepted:rejected:sent:)``).
    ///   - since: The revision to raise `since` to, if any.
    ///   - lastSyncTime: Stored as meta `last_sync_time` if nothing is pending afterwards.
    ///   - next: The limits of the next batch, or `nil` for none.
    /// - Throws: `.databaseAccessFailed` (nothing is applied then).
    package func applySyncAnswer(_ answer: SyncAnswer, sent: [PendingChange], since: Int64?, lastSyncTime: Double?,
                         next: BatchLimits?) throws(LayerSyncError) -> SyncRound {
        try localEdit(.relaxed, freezing: next != nil) { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            var removed = try Self.applyAnswers(db, accepted: answer.accepted, rejected: answer.rejected, sent: sent,
                                                into: &outcome)
            removed += try Self.applyServerRecords(db, answer.changes, since: since, into: &outcome)
            let pending = try pendingCount(db, delta: -removed)
            var round = SyncRound(outcome: outcome, pending: pending, next: nil, storedSyncTime: false)
            if pending == 0, let lastSyncTime {
                try Self.setMeta(db, "last_sync_time", String(lastSyncTime))
                round.storedSyncTime = true
            } else if pending > 0, let next {
                round.next = try Self.takeBatch(db, next)
            }
            return (round, pendingDelta: -removed)
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
    package func beginSnapshot() throws(LayerSyncError) {
        _ = try withDatabase(.relaxed) { db throws(LayerSyncError) in
            try db.query("DELETE FROM snapshot_staging")
        }
    }

    /// Stages one page of a snapshot (one transaction; nothing visible changes, so memory is
    /// bounded by a page). A record seen again keeps its highest revision and its first position.
    /// - Parameter records: The page's records.
    /// - Throws: `.databaseAccessFailed`.
    package func stageSnapshotPage(_ records: [ServerRecord]) throws(LayerSyncError) {
        try withDatabase(.relaxed) { db throws(LayerSyncError) in
            try db.transaction(.relaxed) { () throws(LayerSyncError) in
                for record in records {
                    let content = record.contentText
                    try db.query("""
                        INSERT INTO snapshot_staging(id, revision, content, deleted, created_by, updated_by, grp)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT(id) DO UPDATE SET revision = excluded.revision, content = excluded.content,
                            deleted = excluded.deleted, created_by = excluded.created_by, updated_by = excluded.updated_by,
                            grp = excluded.grp WHERE excluded.revision > snapshot_staging.revision
                        """, [.text(record.id), .integer(record.revision), content.map { .text($0) } ?? .null,
                              .integer(record.deleted || content == nil ? 1 : 0), Self.optional(record.createdBy),
                              Self.optional(record.updatedBy), Self.optional(record.group)])
                }
            }
        }
    }

    /// Replaces the server side of the store with the staged snapshot (first download, or a
    /// new layer epoch) in one transaction, which also marks the layer downloaded — so a
    /// layer is downloaded with all its records or not at all — and re-bases queued local
    /// changes onto it (docs/rules.md rule 7): records with queued changes keep their
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
    package func finishSnapshot(epoch: String, revision: Int64, reportChanges: Bool) throws(LayerSyncError) -> ServerChangeOutcome {
        try transaction(.relaxed) { db throws(LayerSyncError) in
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
                    server_deleted = s.deleted, created_by = s.created_by, updated_by = s.updated_by, grp = s.grp,
                    server_created_by = s.created_by, server_updated_by = s.updated_by, server_grp = s.grp
                FROM snapshot_staging s WHERE s.id = r.id AND \(notPending)
                """)
            // Records with queued changes keep their content; only their server version changes.
            try db.query("""
                UPDATE records AS r SET
                    server_revision = (SELECT s.revision FROM snapshot_staging s WHERE s.id = r.id),
                    server_content = (SELECT s.content FROM snapshot_staging s WHERE s.id = r.id),
                    server_deleted = coalesce((SELECT s.deleted FROM snapshot_staging s WHERE s.id = r.id), 0),
                    (server_created_by, server_updated_by, server_grp) = (
                        SELECT s.created_by, s.updated_by, s.grp FROM snapshot_staging s WHERE s.id = r.id),
                    created_by = coalesce((SELECT s.created_by FROM snapshot_staging s WHERE s.id = r.id), r.created_by)
                WHERE NOT \(notPending)
                """)
            // New records go in already indexed (fts_stale = 0, their FTS rows written straight
            // from them): on a first download that is every record, and marking them stale only
            // to index them and clear the mark again would rewrite each row a second time.
            // They get rowids above every existing one (unless the largest rowid is taken:
            // then the old way).
            let lastRowid = try db.query("SELECT coalesce(max(rowid), 0) FROM records").first?.first?.integer ?? 0
            let indexNow = lastRowid < Int64.max
            try db.query("""
                INSERT INTO records(id, content, server_revision, server_content, server_deleted, fts_stale,
                    created_by, updated_by, grp, server_created_by, server_updated_by, server_grp)
                SELECT s.id, s.content, s.revision, s.content, s.deleted, ?, s.created_by, s.updated_by, s.grp,
                    s.created_by, s.updated_by, s.grp FROM snapshot_staging s
                WHERE NOT EXISTS (SELECT 1 FROM records r WHERE r.id = s.id) ORDER BY s.rowid
                """, [.integer(indexNow ? 0 : 1)])
            if indexNow { try Self.indexRecords(db, afterRowid: lastRowid) }
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
                // The local group goes with it when the snapshot's differs (a create: when it has one).
                try db.query("""
                    UPDATE pending_changes SET grp_given = 1, grp = (SELECT grp FROM records WHERE id = ?1)
                    WHERE record_id = ?1 AND op <> 'delete'
                        AND (SELECT r.grp IS NOT r.server_grp OR (r.server_revision IS NULL AND r.grp IS NOT NULL) FROM records r WHERE r.id = ?1)
                    """, [.text(id)])
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
    package func knownServerRevision(id: String) throws(LayerSyncError) -> Int64? {
        try withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT server_revision FROM records WHERE id = ?", [.text(id)]).first?.first?.integer
        }
    }

    /// Whether the record exists only locally: created here and never confirmed by the server
    /// (a row with `server_revision` NULL). The server does not manage such a record yet.
    /// - Parameter id: The record id.
    /// - Returns: `true` for a local-only record; `false` for one the server confirmed or an unknown id.
    /// - Throws: `.databaseAccessFailed`, `.invalidState` after storage removal.
    package func isLocalOnly(id: String) throws(LayerSyncError) -> Bool {
        try withDatabase { db throws(LayerSyncError) in
            guard let row = try db.query("SELECT server_revision FROM records WHERE id = ?", [.text(id)]).first else { return false }
            return row[0].integer == nil
        }
    }

    // MARK: Helpers (inside a transaction)

    /// The last known server version of a record, `nil` if the server has never confirmed it.
    static func serverVersion(_ db: SQLiteDatabase, id: String) throws(LayerSyncError) -> ServerRecord? {
        guard let row = try db.query("""
            SELECT server_revision, server_content, server_deleted, server_created_by, server_updated_by, server_grp
            FROM records WHERE id = ?
            """, [.text(id)]).first,
              let revision = row[0].integer else { return nil }
        let deleted = row[2].integer == 1
        let content = deleted ? nil : row[1].text.flatMap { try? JSONValue.parse($0) }
        return ServerRecord(id: id, revision: revision, deleted: deleted || content == nil, content: content,
                            createdBy: row[3].text, updatedBy: row[4].text, group: row[5].text)
    }

    /// Records `server` as the record's server version without touching local content.
    static func setServerVersion(_ db: SQLiteDatabase, id: String, server: ServerRecord?) throws(LayerSyncError) {
        try db.query("""
            UPDATE records SET server_revision = ?, server_content = ?, server_deleted = ?, server_created_by = ?,
                server_updated_by = ?, server_grp = ? WHERE id = ?
            """, [server.map { .integer($0.revision) } ?? .null, server?.contentText.map { .text($0) } ?? .null,
                  .integer(server?.deleted == true ? 1 : 0), optional(server?.createdBy), optional(server?.updatedBy),
                  optional(server?.group), .text(id)])
    }

    /// Makes the server version the local one and notes the visible difference in `outcome`.
    /// `nil` means the server has no such record: the local row is removed.
    static func adopt(_ db: SQLiteDatabase, id: String, server: ServerRecord?,
                      into outcome: inout ServerChangeOutcome) throws(LayerSyncError) {
        let row = try db.query("SELECT content FROM records WHERE id = ?", [.text(id)]).first
        let oldContent = row?[0].text
        let newContent = server?.contentText
        if let server {
            let ownership: [SQLiteDatabase.Value] = [optional(server.createdBy), optional(server.updatedBy), optional(server.group)]
            if row == nil {
                try db.query("""
                    INSERT INTO records(id, content, server_revision, server_content, server_deleted, created_by, updated_by, grp,
                        server_created_by, server_updated_by, server_grp) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?6, ?7, ?8)
                    """,
                             [.text(id), newContent.map { .text($0) } ?? .null, .integer(server.revision),
                              newContent.map { .text($0) } ?? .null, .integer(server.deleted ? 1 : 0)] + ownership)
            } else {
                try db.query("""
                    UPDATE records SET content = ?1, server_revision = ?2, server_content = ?1, server_deleted = ?3,
                        created_by = ?4, updated_by = ?5, grp = ?6, server_created_by = ?4, server_updated_by = ?5, server_grp = ?6
                    WHERE id = ?7
                    """, [newContent.map { .text($0) } ?? .null, .integer(server.revision), .integer(server.deleted ? 1 : 0)]
                        + ownership + [.text(id)])
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
