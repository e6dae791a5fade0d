import LayerSyncModel

/// Content migration: rewriting the records of a store written in an older content format
/// (docs/architecture.md §8; Instant's `needsContentMigration` states).
///
/// Content versions (meta `content_version`; absent = current):
/// - 1: Instant JSON v1 records (`"v": 1`, `text` a plain string).
/// - 2: Instant JSON v2 (`"v": 2`, `text` = `{"format": "plain", "value": ...}`), current.
extension LayerStore {
    /// The content version this library writes.
    static let contentVersion = 2

    /// Whether the records are in an older content format (record calls and syncing are
    /// refused with `.contentMigrationNeeded` until ``migrateContent()`` ran).
    package var needsContentMigration: Bool {
        (((try? contentVersion()) ?? nil) ?? Self.contentVersion) < Self.contentVersion
    }

    /// Rewrites every record (local and last known server content) and every unsent change
    /// to the current content format, in one transaction, then records the new version.
    /// Changes already sent keep their frozen payload (a retry must be byte-identical).
    /// - Returns: The number of records rewritten.
    /// - Throws: `.databaseAccessFailed` (nothing is changed then).
    @discardableResult
    package func migrateContent() throws(LayerSyncError) -> Int {
        try transaction(.full) { db throws(LayerSyncError) in
            var rewritten = 0
            for row in try db.query("SELECT id, content, server_content FROM records") {
                guard let id = row[0].text else { continue }
                let content = row[1].text.map(Self.migratedContent)
                let server = row[2].text.map(Self.migratedContent)
                if content != row[1].text || server != row[2].text { rewritten += 1 }
                try db.query("UPDATE records SET content = ?, server_content = ? WHERE id = ?",
                             [content.map { .text($0) } ?? .null, server.map { .text($0) } ?? .null, .text(id)])
            }
            for row in try db.query("SELECT seq, content FROM pending_changes WHERE attempted = 0 AND content IS NOT NULL") {
                guard let text = row[1].text else { continue }
                try db.query("UPDATE pending_changes SET content = ? WHERE seq = ?", [.text(Self.migratedContent(text)), row[0]])
            }
            try Self.setMeta(db, "content_version", String(Self.contentVersion))
            return rewritten
        }
    }

    /// One record's Instant JSON in the current format: `v` 2, a string `text` wrapped as
    /// `{"format": "plain", "value": text}`. Text that does not parse is left as it is.
    static func migratedContent(_ text: String) -> String {
        guard case .object(var object)? = try? JSONValue.parse(text) else { return text }
        if case .string(let plain)? = object["text"] {
            object["text"] = .object(JSONObject([("format", .string("plain")), ("value", .string(plain))]))
        }
        object["v"] = .integer(2)
        return JSONValue.object(object).jsonText
    }
}
