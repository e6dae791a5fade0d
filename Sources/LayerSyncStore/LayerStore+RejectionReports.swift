import LayerSyncModel

/// Conflict reports that survive a crash (table `rejected_changes`, schema version 6;
/// docs/durability.md "Conflict reports").
///
/// Every local change that loses (docs/rules.md rule 3) is written here by
/// ``recordRejection(_:changeID:recordID:reason:localJSON:serverJSON:into:)`` inside the very
/// transaction that adopts the server version, so the adoption and its report commit together
/// or not at all. A report is `delivered` once a `didRejectChanges` event carrying it has been
/// handled (the event handler returned); an undelivered one is delivered again (at the next
/// sync cycle's end, or when the layer is opened again after a crash). Every report, delivered
/// or not, is listed until the host acknowledges it; only the newest
/// ``maximumDeliveredRejections`` delivered ones are kept for hosts that never acknowledge.
extension LayerStore {
    /// Delivered but unacknowledged reports kept per layer; older delivered ones are pruned
    /// when more are marked delivered. Undelivered reports are never pruned.
    package static let maximumDeliveredRejections = 1000

    /// Stores a rejection report and appends it (with its new report id) to `outcome`.
    /// Call inside the transaction that adopts the server version.
    /// - Parameters:
    ///   - db: The connection (inside a transaction).
    ///   - changeID: The change id of the losing change, if any.
    ///   - recordID: The record (or, for `attachment_missing`, the attachment id).
    ///   - reason: Why it lost.
    ///   - localJSON: The losing local version, `nil` for a delete.
    ///   - serverJSON: The winning server version, `nil` when the server has none.
    ///   - outcome: Receives the report.
    /// - Throws: `.databaseAccessFailed` (the transaction then rolls back, adoption included).
    static func recordRejection(_ db: SQLiteDatabase, changeID: String?, recordID: String, reason: String,
                                localJSON: String?, serverJSON: String?,
                                into outcome: inout ServerChangeOutcome) throws(LayerSyncError) {
        let report = RejectedChange(reportID: ULID.generate(), changeID: changeID, recordID: recordID, reason: reason,
                                    localJSON: localJSON, serverJSON: serverJSON)
        try db.query("""
            INSERT INTO rejected_changes(id, change_id, record_id, reason, local_content, server_content)
            VALUES (?, ?, ?, ?, ?, ?)
            """, [.text(report.reportID), changeID.map { .text($0) } ?? .null, .text(recordID), .text(reason),
                  localJSON.map { .text($0) } ?? .null, serverJSON.map { .text($0) } ?? .null])
        outcome.rejections.append(report)
    }

    /// The stored reports, oldest first.
    /// - Parameter undeliveredOnly: Only those no `didRejectChanges` event has been handled for.
    /// - Returns: Each report and whether it was delivered.
    /// - Throws: `.databaseAccessFailed`, `.invalidState` after storage removal.
    package func rejectionReports(undeliveredOnly: Bool = false) throws(LayerSyncError) -> [(report: RejectedChange, delivered: Bool)] {
        try withDatabase { db throws(LayerSyncError) in
            try db.query("""
                SELECT id, change_id, record_id, reason, local_content, server_content, delivered
                FROM rejected_changes \(undeliveredOnly ? "WHERE delivered = 0" : "") ORDER BY seq
                """).compactMap { row in
                guard let id = row[0].text, let recordID = row[2].text, let reason = row[3].text else { return nil }
                return (RejectedChange(reportID: id, changeID: row[1].text, recordID: recordID, reason: reason,
                                       localJSON: row[4].text, serverJSON: row[5].text), row[6].integer == 1)
            }
        }
    }

    /// Marks reports delivered (a `didRejectChanges` event carrying them was handled) and prunes
    /// delivered ones beyond ``maximumDeliveredRejections``. Commits without an fsync: a mark
    /// lost in a power loss only means one more delivery (at least once).
    /// - Parameter ids: Report ids; unknown ones are ignored.
    /// - Throws: `.databaseAccessFailed`, `.invalidState` after storage removal.
    package func markRejectionsDelivered(_ ids: [String]) throws(LayerSyncError) {
        guard !ids.isEmpty else { return }
        try transaction(.relaxed) { db throws(LayerSyncError) in
            for id in ids { try db.query("UPDATE rejected_changes SET delivered = 1 WHERE id = ?", [.text(id)]) }
            try db.query("""
                DELETE FROM rejected_changes WHERE delivered = 1 AND seq <= (
                    SELECT seq FROM rejected_changes WHERE delivered = 1 ORDER BY seq DESC LIMIT 1 OFFSET ?)
                """, [.integer(Int64(Self.maximumDeliveredRejections))])
        }
    }

    /// Deletes reports the host has dealt with (acknowledged), delivered or not.
    /// - Parameter ids: Report ids; unknown (or already acknowledged) ones are ignored.
    /// - Returns: How many reports were deleted.
    /// - Throws: `.databaseAccessFailed`, `.invalidState` after storage removal.
    package func acknowledgeRejections(_ ids: [String]) throws(LayerSyncError) -> Int {
        guard !ids.isEmpty else { return 0 }
        return try transaction { db throws(LayerSyncError) in
            var deleted = 0
            for id in ids {
                try db.query("DELETE FROM rejected_changes WHERE id = ?", [.text(id)])
                deleted += db.changes
            }
            return deleted
        }
    }
}
