import LayerSyncModel

/// A live record as the store holds it: its content and its ownership (collaboration
/// permissions; protocol.md "Record shape").
package struct StoredRecord: Sendable, Equatable {
    /// The record id.
    package var id: String
    /// The Instant JSON text.
    package var content: String
    /// `createdBy` (the server's, or the local user's until the server answered a local create).
    package var createdBy: String?
    /// `updatedBy`.
    package var updatedBy: String?
    /// `group`.
    package var group: String?
    /// `content.type` when it is a string.
    package var type: String?

    /// A record.
    package init(id: String, content: String, createdBy: String?, updatedBy: String?, group: String?, type: String?) {
        self.id = id
        self.content = content
        self.createdBy = createdBy
        self.updatedBy = updatedBy
        self.group = group
        self.type = type
    }

    /// The ownership the permissions judge the record by.
    package var ownership: RecordOwnership { RecordOwnership(type: type, createdBy: createdBy, group: group) }
}

/// Ownership, the default group and what a reauthentication with other grants changes
/// (docs/protocol.md "Collaboration permissions").
extension LayerStore {
    /// The columns ``storedRecord(_:)`` reads, in order (of `records`, aliased `r`).
    static let storedColumns = """
        r.id, r.content, r.created_by, r.updated_by, r.grp,
        CASE WHEN json_valid(r.content) THEN (CASE json_type(r.content, '$.type') WHEN 'text' THEN json_extract(r.content, '$.type') END) END
        """

    /// A row of ``storedColumns``, `nil` for a deleted one.
    static func storedRecord(_ row: [SQLiteDatabase.Value]) -> StoredRecord? {
        guard let id = row[0].text, let content = row[1].text else { return nil }
        return StoredRecord(id: id, content: content, createdBy: row[2].text, updatedBy: row[3].text, group: row[4].text,
                            type: row[5].text)
    }

    /// A live record with its ownership.
    /// - Parameter id: The record id.
    /// - Returns: The record, `nil` when no live record has `id`.
    /// - Throws: `.databaseAccessFailed`.
    package func storedRecord(id: String) throws(LayerSyncError) -> StoredRecord? {
        try withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT \(Self.storedColumns) FROM records r WHERE r.id = ?", [.text(id)]).first.flatMap(Self.storedRecord)
        }
    }

    /// Runs a query of ``storedColumns`` and returns its live records.
    func storedRecords(_ sql: String, _ bindings: [SQLiteDatabase.Value]) throws(LayerSyncError) -> [StoredRecord] {
        try withDatabase { db throws(LayerSyncError) in try db.query(sql, bindings).compactMap(Self.storedRecord) }
    }

    /// The live replies of a root record (what deleting the root takes with it).
    /// - Parameter rootID: The root's id.
    /// - Returns: The replies, oldest row first.
    /// - Throws: `.databaseAccessFailed`.
    package func replies(rootID: String) throws(LayerSyncError) -> [StoredRecord] {
        try replies(rootIDs: [rootID])[rootID] ?? []
    }

    /// The live replies of several root records in one query (one index lookup per root, index
    /// `records_root`: a list of records handed out asks for all of theirs at once; a create
    /// or update under a claim asks for its record's, so this must not scan the records).
    /// - Parameter rootIDs: The roots' ids.
    /// - Returns: Each root id that has live replies with them, oldest row first; a root
    ///   without replies is absent.
    /// - Throws: `.databaseAccessFailed`.
    package func replies(rootIDs: [String]) throws(LayerSyncError) -> [String: [StoredRecord]] {
        guard !rootIDs.isEmpty else { return [:] }
        let ids = JSONValue.array(rootIDs.map(JSONValue.string)).jsonText
        return try withDatabase { db throws(LayerSyncError) in
            var replies: [String: [StoredRecord]] = [:]
            for row in try db.query("""
                SELECT \(Self.storedColumns), \(Self.rootIDExpression) AS root FROM records r
                WHERE content IS NOT NULL AND root IN (SELECT value FROM json_each(?)) AND r.id <> root ORDER BY r.rowid
                """, [.text(ids)]) {
                guard let root = row[6].text, let reply = Self.storedRecord(row) else { continue }
                replies[root, default: []].append(reply)
            }
            return replies
        }
    }

    /// The live form fields (`content.type` `pspdfkit/form-field/*`) with these `name`s, in one
    /// query: what a form field value's `fill` is judged by, and the group it inherits.
    /// - Parameter names: The fields' names (a value's `name`, a widget's `formFieldName`).
    /// - Returns: Each name that has a form field with its field (the oldest row when several
    ///   share a name); a name without one is absent.
    /// - Throws: `.databaseAccessFailed`.
    package func formFields(names: [String]) throws(LayerSyncError) -> [String: StoredRecord] {
        guard !names.isEmpty else { return [:] }
        let list = JSONValue.array(names.map(JSONValue.string)).jsonText
        return try withDatabase { db throws(LayerSyncError) in
            var fields: [String: StoredRecord] = [:]
            for row in try db.query("""
                SELECT \(Self.storedColumns), CASE WHEN json_valid(r.content) THEN json_extract(r.content, '$.name') END AS name
                FROM records r WHERE r.content IS NOT NULL AND name IN (SELECT value FROM json_each(?)) ORDER BY r.rowid
                """, [.text(list)]) {
                guard let name = row[6].text, fields[name] == nil, let field = Self.storedRecord(row),
                      field.type?.hasPrefix("pspdfkit/form-field/") == true else { continue }
                fields[name] = field
            }
            return fields
        }
    }

    /// ``formFields(names:)`` of one name.
    /// - Parameter name: The field's name, `nil` for none (no field).
    package func formField(name: String?) throws(LayerSyncError) -> StoredRecord? {
        guard let name else { return nil }
        return try formFields(names: [name])[name]
    }

    // MARK: Default group

    /// Sets (or with `nil` removes, Instant's `resetDefaultGroup`) the override; durable on return.
    /// - Throws: `.databaseAccessFailed`.
    package func setDefaultGroupOverride(_ group: String?) throws(LayerSyncError) {
        try setMeta("default_group_override", group)
    }

    // MARK: Grants the local records reflect

    /// The collaboration permissions and user the local records were last filtered for by the
    /// server (meta `applied_permissions`: the claim's entries as a JSON array, `null` for no
    /// claim; `applied_user_id`). `nil` when never stored (a store from before permissions:
    /// it was filtered for no claim at all, i.e. everything was sent).
    /// - Throws: `.databaseAccessFailed`.
    package func appliedGrant() throws(LayerSyncError) -> (permissions: [String]?, userID: String?)? {
        try withDatabase { db throws(LayerSyncError) in
            guard let text = try Self.meta(db, "applied_permissions") else { return nil }
            let entries = (try? JSONValue.parse(text))?.arrayValue?.compactMap(\.stringValue)
            return (entries, try Self.meta(db, "applied_user_id"))
        }
    }

    /// Stores what ``appliedGrant()`` returns.
    static func setAppliedGrant(_ db: SQLiteDatabase, permissions: [String]?, userID: String?) throws(LayerSyncError) {
        let claim = permissions.map { JSONValue.array($0.map(JSONValue.string)) } ?? .null
        try setMeta(db, "applied_permissions", claim.jsonText)
        try setMeta(db, "applied_user_id", userID)
    }

    /// Stores the grant the local records reflect (after a first download with it).
    /// - Throws: `.databaseAccessFailed`.
    package func setAppliedGrant(permissions: [String]?, userID: String?) throws(LayerSyncError) {
        try withDatabase(.relaxed) { db throws(LayerSyncError) in
            defer { invalidateCache() }
            try Self.setAppliedGrant(db, permissions: permissions, userID: userID)
        }
    }

    /// Applies the answer of a delta request made with `previous_permissions` (protocol.md
    /// "Reauthentication with other grants") in one transaction: the page's records as any
    /// delta (``applyServerRecords(_:since:)``), then `regranted`: a whole record appears (or
    /// replaces the local copy), a bare tombstone makes the record disappear whatever its
    /// revision (it left the token's view; the server will never send it again). A record that
    /// disappears with local changes queued loses them: they can never be sent, and each is
    /// reported through `didRejectChanges` with reason `forbidden` (with the local version), not
    /// silently dropped. Afterwards the store reflects the new grant (``appliedGrant()``).
    /// - Parameters:
    ///   - page: The page, with its `regranted`.
    ///   - since: The revision to raise `since` to.
    ///   - permissions: The new token's claim entries (`nil`: none).
    ///   - userID: The new token's `user_id`.
    /// - Returns: What changed locally (records created and deleted, rejections).
    /// - Throws: `.databaseAccessFailed`.
    package func applyRegranted(_ page: LayerPage, since: Int64, permissions: [String]?,
                                userID: String?) throws(LayerSyncError) -> ServerChangeOutcome {
        try localEdit(.relaxed) { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            var removed = try Self.applyServerRecords(db, page.records, since: since, into: &outcome)
            for record in page.regranted {
                if !record.deleted {
                    removed += try Self.applyServerRecords(db, [record], since: nil, into: &outcome)
                    continue
                }
                let pending = try db.query("SELECT change_id, content FROM pending_changes WHERE record_id = ? ORDER BY seq",
                                           [.text(record.id)])
                if let last = pending.last {
                    try Self.recordRejection(db, changeID: last[0].text, recordID: record.id, reason: "forbidden",
                                        localJSON: last[1].text, serverJSON: nil, into: &outcome)
                    try db.query("DELETE FROM pending_changes WHERE record_id = ?", [.text(record.id)])
                    removed += db.changes
                }
                try Self.adopt(db, id: record.id, server: nil, into: &outcome)
            }
            try Self.setAppliedGrant(db, permissions: permissions, userID: userID)
            return (outcome, pendingDelta: -removed)
        }
    }
}
