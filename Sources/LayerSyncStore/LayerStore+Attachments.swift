import LayerSyncModel

/// Attachment bookkeeping of a layer store (the bytes are files; see ``StorageLayout``).
extension LayerStore {
    /// Records an attachment added locally, to be uploaded by the next sync cycle.
    /// - Parameters:
    ///   - id: The SHA-256 hex of the bytes.
    ///   - contentType: Its MIME type.
    /// - Throws: `.databaseAccessFailed`.
    package func addAttachment(id: String, contentType: String) throws(LayerSyncError) {
        try withDatabase { db throws(LayerSyncError) in
            defer { invalidateCache() }
            try db.query("INSERT INTO attachments(id, content_type) VALUES (?, ?) ON CONFLICT(id) DO NOTHING",
                         [.text(id), .text(contentType)])
        }
    }

    /// Records an attachment downloaded from the server (already uploaded).
    package func noteDownloadedAttachment(id: String, contentType: String) throws(LayerSyncError) {
        try withDatabase { db throws(LayerSyncError) in
            defer { invalidateCache() }
            try db.query("""
                INSERT INTO attachments(id, content_type, uploaded) VALUES (?, ?, 1)
                ON CONFLICT(id) DO UPDATE SET uploaded = 1
                """, [.text(id), .text(contentType)])
        }
    }

    /// The live records whose content mentions `text` (an attachment id: the records that use
    /// it), compared exactly, as the server's `records_mentioning`.
    /// - Throws: `.databaseAccessFailed`.
    package func recordsMentioning(_ text: String) throws(LayerSyncError) -> [StoredRecord] {
        try storedRecords("SELECT \(Self.storedColumns) FROM records r WHERE instr(r.content, ?) > 0", [.text(text)])
    }

    /// Attachments not yet on the server, oldest first: (id, content type).
    package func pendingAttachments() throws(LayerSyncError) -> [(id: String, contentType: String)] {
        try withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT id, content_type FROM attachments WHERE uploaded = 0 ORDER BY rowid").compactMap { row in
                guard let id = row[0].text, let type = row[1].text else { return nil }
                return (id, type)
            }
        }
    }

    /// Marks an attachment as stored on the server.
    package func markAttachmentUploaded(id: String) throws(LayerSyncError) {
        try withDatabase { db throws(LayerSyncError) in
            defer { invalidateCache() }
            try db.query("UPDATE attachments SET uploaded = 1 WHERE id = ?", [.text(id)])
        }
    }

    /// Forgets an attachment whose upload can never happen (its file vanished), so that it
    /// no longer blocks the sync cycle, and stores its rejection report (`attachment_missing`,
    /// the attachment id as record id) in the same transaction.
    /// - Returns: The report (none when the attachment was not pending).
    package func dropPendingAttachment(id: String) throws(LayerSyncError) -> ServerChangeOutcome {
        try transaction(.relaxed) { db throws(LayerSyncError) in
            var outcome = ServerChangeOutcome()
            try db.query("DELETE FROM attachments WHERE id = ? AND uploaded = 0", [.text(id)])
            guard db.changes > 0 else { return outcome }
            try Self.recordRejection(db, changeID: nil, recordID: id, reason: "attachment_missing", localJSON: nil, serverJSON: nil,
                                     into: &outcome)
            return outcome
        }
    }

    /// The content type recorded for an attachment, if this layer knows it.
    package func attachmentContentType(id: String) throws(LayerSyncError) -> String? {
        try withDatabase { db throws(LayerSyncError) in
            try db.query("SELECT content_type FROM attachments WHERE id = ?", [.text(id)]).first?.first?.text
        }
    }
}
