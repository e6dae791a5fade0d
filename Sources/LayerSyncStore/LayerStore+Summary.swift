import LayerSyncModel

/// What the client-level storage functions read from a layer store without a descriptor.
extension LayerStore {
    /// A layer store's identity and status, for ``SyncClient/localDocumentsJSON()``.
    package struct Summary: Sendable {
        package var documentID: String?
        package var layerName: String?
        package var downloaded: Bool
        package var pendingChanges: Int
        /// Attachments added locally and not uploaded yet (unsynced too).
        package var pendingAttachments: Int
        package var recordCount: Int
    }

    /// Reads the summary.
    /// - Returns: The summary.
    /// - Throws: `.databaseAccessFailed`, `.invalidState` after ``close()``.
    package func summary() throws(LayerSyncError) -> Summary {
        try withDatabase { db throws(LayerSyncError) in
            Summary(
                documentID: try Self.meta(db, "document_id"),
                layerName: try Self.meta(db, "layer_name"),
                downloaded: try Self.meta(db, "downloaded") == "1",
                pendingChanges: Int(try db.query("SELECT count(*) FROM pending_changes").first?.first?.integer ?? 0),
                pendingAttachments: Int(try db.query("SELECT count(*) FROM attachments WHERE uploaded = 0").first?.first?.integer ?? 0),
                recordCount: Int(try db.query("SELECT count(*) FROM records WHERE content IS NOT NULL").first?.first?.integer ?? 0))
        }
    }

    /// Attachment ids (SHA-256 hex) that the layer's records (local or last known server
    /// version) reference through `imageAttachmentId` or `fileAttachmentId`, plus the
    /// attachments added locally whose upload is still queued (a record may reference them
    /// later; the sync cycle needs their bytes).
    /// - Returns: The ids.
    /// - Throws: `.databaseAccessFailed`, `.invalidState` after ``close()``.
    package func referencedAttachmentIDs() throws(LayerSyncError) -> Set<String> {
        try withDatabase { db throws(LayerSyncError) in
            var ids = Set(try db.query("SELECT id FROM attachments WHERE uploaded = 0").compactMap { $0.first?.text })
            for column in ["content", "server_content"] {
                for key in ["imageAttachmentId", "fileAttachmentId"] {
                    for row in try db.query("SELECT DISTINCT json_extract(\(column), '$.\(key)') FROM records WHERE json_valid(\(column))") {
                        if let id = row.first?.text { ids.insert(id) }
                    }
                }
            }
            return ids
        }
    }
}
