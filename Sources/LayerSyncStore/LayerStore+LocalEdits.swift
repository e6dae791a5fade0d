import LayerSyncModel

/// Local record edits: each one commits the record and its pending change in one
/// transaction (docs/rules.md rule 1).
extension LayerStore {
    /// Inserts a new record and queues its `create`.
    /// - Parameters:
    ///   - id: The record id.
    ///   - content: The Instant JSON text to store.
    ///   - createdBy: Its `createdBy` until the server answers (the token's `user_id`).
    ///   - group: Its group (the host's or the current default group).
    ///   - sendGroup: Whether the create sends `group` (else the server applies its `default_group`).
    /// - Throws: `.invalidArgument` if a record (live or deleted) with `id` exists; `.databaseAccessFailed`.
    package func createRecord(id: String, content: String, createdBy: String? = nil, group: String? = nil,
                              sendGroup: Bool = false) throws(LayerSyncError) {
        try localEdit { db throws(LayerSyncError) in
            if try !db.query("SELECT 1 FROM records WHERE id = ?", [.text(id)]).isEmpty {
                throw LayerSyncError(.invalidArgument, "a record with id \(id) already exists", recordID: id)
            }
            try db.query("INSERT INTO records(id, content, created_by, updated_by, grp) VALUES (?, ?, ?, ?, ?)",
                         [.text(id), .text(content), Self.optional(createdBy), Self.optional(createdBy), Self.optional(group)])
            return ((), try Self.enqueue(db, recordID: id, operation: .create, content: content,
                                         group: sendGroup ? .some(group) : nil))
        }
    }

    /// Replaces a live record's content and queues an `update`.
    /// - Parameters:
    ///   - id: The record id.
    ///   - content: The new Instant JSON text.
    ///   - updatedBy: Its `updatedBy` until the server answers (the token's `user_id`).
    ///   - group: `nil` to keep the record's group, else its new group (sent with the change).
    /// - Throws: `.noSuchAnnotation` if no live record has `id`; `.databaseAccessFailed`.
    package func updateRecord(id: String, content: String, updatedBy: String? = nil,
                              group: String?? = nil) throws(LayerSyncError) {
        try localEdit { db throws(LayerSyncError) in
            guard case .text? = try db.query("SELECT content FROM records WHERE id = ?", [.text(id)]).first?.first else {
                throw LayerSyncError(.noSuchAnnotation, "no annotation with id \(id)", recordID: id)
            }
            try db.query("UPDATE records SET content = ?, updated_by = coalesce(?, updated_by) WHERE id = ?",
                         [.text(content), Self.optional(updatedBy), .text(id)])
            if let group { try db.query("UPDATE records SET grp = ? WHERE id = ?", [Self.optional(group), .text(id)]) }
            return ((), try Self.enqueue(db, recordID: id, operation: .update, content: content, group: group))
        }
    }

    /// Deletes a live record and every live record whose `rootId` is its id (its comments),
    /// queueing a `delete` for each.
    /// - Parameter id: The record id.
    /// - Returns: The ids deleted, the record first.
    /// - Throws: `.noSuchAnnotation` if no live record has `id`; `.databaseAccessFailed`.
    @discardableResult
    package func deleteRecord(id: String) throws(LayerSyncError) -> [String] {
        try localEdit { db throws(LayerSyncError) in
            guard case .text? = try db.query("SELECT content FROM records WHERE id = ?", [.text(id)]).first?.first else {
                throw LayerSyncError(.noSuchAnnotation, "no annotation with id \(id)", recordID: id)
            }
            let comments = try db.query(
                "SELECT id FROM records WHERE content IS NOT NULL AND id <> ? AND \(Self.rootIDExpression) = ? ORDER BY rowid",
                [.text(id), .text(id)]
            ).compactMap { $0.first?.text }
            let ids = [id] + comments
            var delta = 0
            for recordID in ids {
                try db.query("UPDATE records SET content = NULL WHERE id = ?", [.text(recordID)])
                delta += try Self.enqueue(db, recordID: recordID, operation: .delete, content: nil)
            }
            return (ids, delta)
        }
    }

    /// Queues a change, coalescing it into the record's newest not-yet-sent change:
    /// create+update → create, update+update → update, update+delete → delete, and
    /// create+delete of a never-sent create → nothing (the record is forgotten). A change
    /// behind a frozen (already sent) one gets its own row.
    /// - Returns: How many rows `pending_changes` gained (1, 0 or -1).
    /// A group given (`group` non-nil: the change sends `"group"`, its value possibly null)
    /// replaces the coalesced row's; none keeps it.
    @discardableResult
    static func enqueue(_ db: SQLiteDatabase, recordID: String, operation: PendingChange.Operation,
                        content: String?, group: String?? = nil) throws(LayerSyncError) -> Int {
        let rows = try db.query(
            "SELECT seq, op, attempted FROM pending_changes WHERE record_id = ? ORDER BY seq", [.text(recordID)])
        if let last = rows.last, last[2].integer == 0, let sequence = last[0].integer,
           let lastOperation = last[1].text.flatMap(PendingChange.Operation.init(rawValue:)) {
            switch (lastOperation, operation) {
            case (.create, .delete) where rows.count == 1:
                try db.query("DELETE FROM pending_changes WHERE seq = ?", [.integer(sequence)])
                try db.query("DELETE FROM records WHERE id = ? AND server_revision IS NULL", [.text(recordID)])
                return -1
            case (.create, _):
                try db.query("UPDATE pending_changes SET op = ?, content = ? WHERE seq = ?",
                             [.text(operation == .delete ? "delete" : "create"), content.map { .text($0) } ?? .null, .integer(sequence)])
            default:
                try db.query("UPDATE pending_changes SET op = ?, content = ? WHERE seq = ?",
                             [.text(operation.rawValue), content.map { .text($0) } ?? .null, .integer(sequence)])
            }
            if let group {
                try db.query("UPDATE pending_changes SET grp_given = 1, grp = ? WHERE seq = ?", [optional(group), .integer(sequence)])
            }
            db.rewrittenPendingChanges += 1
            return 0
        }
        try db.query("INSERT INTO pending_changes(change_id, record_id, op, content, grp_given, grp) VALUES (?, ?, ?, ?, ?, ?)",
                     [.text(ULID.generate()), .text(recordID), .text(operation.rawValue), content.map { .text($0) } ?? .null,
                      .integer(group == nil ? 0 : 1), optional(group ?? nil)])
        return 1
    }

    /// A text value or NULL.
    static func optional(_ text: String?) -> SQLiteDatabase.Value { text.map { .text($0) } ?? .null }

    /// The content of a live record.
    /// - Parameter id: The record id.
    /// - Returns: The Instant JSON text, or `nil` if there is no live record with `id`.
    /// - Throws: `.databaseAccessFailed`.
    package func record(id: String) throws(LayerSyncError) -> String? {
        try withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT content FROM records WHERE id = ?", [.text(id)]).first?.first?.text
        }
    }

    /// Filter of ``listRecords(filter:)``; every field optional.
    package struct RecordFilter: Sendable {
        package var pageIndex: Int64?
        package var type: String?
        package var creatorName: String?
        package var limit: Int64?
        package var offset: Int64?

        /// A filter; with no arguments it lets every live record through.
        package init(pageIndex: Int64? = nil, type: String? = nil, creatorName: String? = nil, limit: Int64? = nil,
                     offset: Int64? = nil) {
            self.pageIndex = pageIndex
            self.type = type
            self.creatorName = creatorName
            self.limit = limit
            self.offset = offset
        }
    }

    /// Live records in creation order, filtered.
    /// - Parameter filter: The filter.
    /// - Returns: The records' Instant JSON texts.
    /// - Throws: `.databaseAccessFailed`.
    package func listRecords(filter: RecordFilter) throws(LayerSyncError) -> [String] {
        try listStoredRecords(filter: filter).map(\.content)
    }

    /// ``listRecords(filter:)`` with each record's ownership.
    package func listStoredRecords(filter: RecordFilter) throws(LayerSyncError) -> [StoredRecord] {
        var sql = "SELECT \(Self.storedColumns) FROM records r WHERE content IS NOT NULL"
        var bindings: [SQLiteDatabase.Value] = []
        if let pageIndex = filter.pageIndex {
            sql += " AND json_extract(content, '$.pageIndex') = ?"
            bindings.append(.integer(pageIndex))
        }
        if let type = filter.type {
            sql += " AND json_extract(content, '$.type') = ?"
            bindings.append(.text(type))
        }
        if let creatorName = filter.creatorName {
            sql += " AND json_extract(content, '$.creatorName') = ?"
            bindings.append(.text(creatorName))
        }
        sql += " ORDER BY id LIMIT ? OFFSET ?"
        bindings.append(.integer(filter.limit ?? -1))
        bindings.append(.integer(filter.offset ?? 0))
        return try storedRecords(sql, bindings)
    }

    /// Live records whose string values match a full-text query, best match first (FTS5 `rank`).
    /// - Parameters:
    ///   - query: Words; each must occur (as a word prefix, case- and diacritics-insensitive).
    ///   - limit: Maximum number of results.
    /// - Returns: The records' Instant JSON texts.
    /// - Throws: `.invalidArgument` for a query without words; `.databaseAccessFailed`.
    package func searchRecords(query: String, limit: Int64) throws(LayerSyncError) -> [String] {
        try searchStoredRecords(query: query, limit: limit).map(\.content)
    }

    /// ``searchRecords(query:limit:)`` with each record's ownership.
    package func searchStoredRecords(query: String, limit: Int64) throws(LayerSyncError) -> [StoredRecord] {
        // A word is what the unicode61 tokenizer indexes: a run of letters and digits. Pieces
        // without any ("!!!", "--") would match nothing, so they are not words.
        let words = query.split(whereSeparator: { $0.isWhitespace })
            .filter { $0.unicodeScalars.contains { $0.properties.isAlphabetic || $0.properties.numericType != nil } }
            .map { word in "\"" + word.replacing("\"", with: "\"\"") + "\"*" }
        guard !words.isEmpty else { throw LayerSyncError(.invalidArgument, "the search query has no words") }
        // The index is derived data: a power loss can only undo the indexing, never the
        // `fts_stale` marks of the writes, so it commits without an fsync (CommitDurability).
        return try withDatabase(.relaxed) { db throws(LayerSyncError) in
            try db.transaction(.relaxed) { () throws(LayerSyncError) in try Self.indexStaleRecords(db) }
            return try db.query("""
                SELECT \(Self.storedColumns) FROM records_fts f JOIN records r ON r.rowid = f.rowid
                WHERE records_fts MATCH ? AND r.content IS NOT NULL ORDER BY f.rank, r.id LIMIT ?
                """, [.text(words.joined(separator: " ")), .integer(limit)]).compactMap(Self.storedRecord)
        }
    }

    /// Writes the FTS rows of the live records whose rowid is above `afterRowid` (same text as
    /// ``indexStaleRecords(_:)``), for records just inserted with `fts_stale = 0`; an FTS row
    /// already there (none is expected) is dropped first. Call inside a transaction.
    static func indexRecords(_ db: SQLiteDatabase, afterRowid: Int64) throws(LayerSyncError) {
        try db.query("DELETE FROM records_fts WHERE rowid > ?", [.integer(afterRowid)])
        try db.query("""
            INSERT INTO records_fts(rowid, body)
            SELECT r.rowid, (SELECT group_concat(value, ' ') FROM json_tree(r.content) WHERE type = 'text')
            FROM records r WHERE r.rowid > ? AND r.content IS NOT NULL
            """, [.integer(afterRowid)])
    }

    /// Brings `records_fts` up to date with every record written since the last call
    /// (`fts_stale` = 1), in one batch. Call inside a transaction.
    static func indexStaleRecords(_ db: SQLiteDatabase) throws(LayerSyncError) {
        try db.query("DELETE FROM records_fts WHERE rowid IN (SELECT rowid FROM records WHERE fts_stale = 1)")
        try db.query("""
            INSERT INTO records_fts(rowid, body)
            SELECT r.rowid, (SELECT group_concat(value, ' ') FROM json_tree(r.content) WHERE type = 'text')
            FROM records r WHERE r.fts_stale = 1 AND r.content IS NOT NULL
            """)
        try db.query("UPDATE records SET fts_stale = 0 WHERE fts_stale = 1")
    }

    /// Live comments of a root record (`rootId` = `rootID`), oldest first (`createdAt`, then id).
    /// - Parameter rootID: The root record's id.
    /// - Returns: The comments' Instant JSON texts.
    /// - Throws: `.noSuchAnnotation` when no live record has `rootID`; `.databaseAccessFailed`.
    package func comments(rootID: String) throws(LayerSyncError) -> [String] {
        try storedComments(rootID: rootID).map(\.content)
    }

    /// ``comments(rootID:)`` with each comment's ownership.
    package func storedComments(rootID: String) throws(LayerSyncError) -> [StoredRecord] {
        try withDatabase { db throws(LayerSyncError) in
            guard case .text? = try db.query("SELECT content FROM records WHERE id = ?", [.text(rootID)]).first?.first else {
                throw LayerSyncError(.noSuchAnnotation, "no annotation with id \(rootID)", recordID: rootID)
            }
            return try db.query("""
                SELECT \(Self.storedColumns) FROM records r WHERE content IS NOT NULL AND id <> ? AND \(Self.rootIDExpression) = ?
                ORDER BY json_extract(content, '$.createdAt'), id
                """, [.text(rootID), .text(rootID)]).compactMap(Self.storedRecord)
        }
    }
}
