import LayerSyncModel
import LayerSyncStore

/// Conflict reports that survive a crash (docs/durability.md "Conflict reports",
/// docs/rules.md rule 3).
///
/// The store writes each rejected change as a report in the transaction that adopts the
/// server version (LayerStore+RejectionReports.swift). Delivery is at least once:
/// - a `didRejectChanges` event carries reports right after they were committed;
/// - when a sync cycle ends (finished or failed: a continuation page cut, `stopSyncing`),
///   every report not delivered yet is delivered before `didFinishSync`/`didFailSync`;
/// - when the layer is opened (the first ``SyncClient/document(forJWT:)`` of a client), every
///   report left undelivered by an earlier process (killed before its handler returned) is
///   delivered again, with the same ``RejectedChange/reportID``.
///
/// A report is marked delivered when the event handler returned from the event that carried
/// it (in the C ABI: the delegate's and every observer's `did_reject_changes`). Delivered
/// reports are not sent again, but stay listed by ``rejectedChanges()`` until
/// ``acknowledgeRejectedChanges(ids:)`` deletes them (the newest
/// ``LayerStore/maximumDeliveredRejections`` are kept for hosts that never acknowledge).
extension DocumentDescriptor {
    /// Emits `didRejectChanges` for reports just committed (``report(_:)``).
    /// - Parameter reports: Stored reports (with their report ids).
    func deliverRejections(_ reports: [RejectedChange]) {
        deliverReports { () throws(LayerSyncError) in reports }
    }

    /// Emits `didRejectChanges` for every stored report no handler has returned from yet
    /// (none if the store cannot be read: it is tried again at the next cycle's end). Runs on
    /// the work queue, like every store write that adds reports.
    func deliverUndeliveredRejections() {
        deliverReports { () throws(LayerSyncError) in try store.rejectionReports(undeliveredOnly: true).map(\.report) }
    }

    /// Emits one event with the candidates that are not on their way already, and marks them
    /// delivered on the event thread once the handler returned from it. Serialised by
    /// ``reportsInDelivery``'s lock, so one process never emits a report twice (a crash can
    /// make the next process emit it again: hosts drop duplicates by report id).
    private func deliverReports(_ candidates: () throws(LayerSyncError) -> [RejectedChange]) {
        reportsInDelivery.withLock { inDelivery in
            guard let all = try? candidates() else { return }
            let reports = all.filter { inDelivery.insert($0.reportID).inserted }
            guard !reports.isEmpty else { return }
            let ids = reports.map(\.reportID)
            emit(.didRejectChanges(self, reports))
            // Runs after the handler returned from that event; never if the process dies first,
            // and then the reports stay undelivered for the next open.
            context.events.perform { [self] in
                try? store.markRejectionsDelivered(ids)
                reportsInDelivery.withLock { $0.subtract(ids) }
            }
        }
    }

    /// The layer's stored conflict reports, oldest first: every rejected local change the host
    /// has not acknowledged, delivered through `didRejectChanges` or not (the pull side of the
    /// reports, for hosts that read rather than listen; LayerSync's own).
    /// - Returns: Each report and whether a `didRejectChanges` event carrying it was handled.
    /// - Throws: `.invalidState` after storage removal, `.contentMigrationNeeded` while the
    ///   store needs a reset for a database migration, `.databaseAccessFailed`.
    public func rejectedChanges() throws(LayerSyncError) -> [(report: RejectedChange, delivered: Bool)] {
        try requireReadableStore()
        return try store.rejectionReports()
    }

    /// ``rejectedChanges()`` as JSON: `[{"report_id", "change_id", "id", "reason", "code",
    /// "local", "server", "delivered"}]` (the objects of the `did_reject_changes` payload plus
    /// `delivered`).
    public func rejectedChangesJSON() throws(LayerSyncError) -> String {
        JSONValue.array(try rejectedChanges().map { $0.report.jsonObject([("delivered", .bool($0.delivered))]) }).jsonText
    }

    /// Deletes conflict reports the host has dealt with: they are neither listed nor delivered
    /// again. Unknown ids (already acknowledged, pruned, or never issued) are ignored.
    /// - Parameter ids: Report ids (``RejectedChange/reportID``).
    /// - Returns: How many reports were deleted.
    /// - Throws: `.invalidArgument` for an empty id, `.invalidState`, `.contentMigrationNeeded`,
    ///   `.databaseAccessFailed`.
    @discardableResult
    public func acknowledgeRejectedChanges(ids: [String]) throws(LayerSyncError) -> Int {
        guard !ids.contains(where: \.isEmpty) else { throw LayerSyncError(.invalidArgument, "a report id is empty") }
        try requireReadableStore()
        return try store.acknowledgeRejections(ids)
    }

    /// ``acknowledgeRejectedChanges(ids:)`` with the ids as a JSON array of strings.
    /// - Throws: `.invalidArgument` when `idsJSON` is not an array of non-empty strings; as
    ///   ``acknowledgeRejectedChanges(ids:)``.
    @discardableResult
    public func acknowledgeRejectedChanges(idsJSON: String) throws(LayerSyncError) -> Int {
        guard let items = try JSONValue.parse(idsJSON).arrayValue else {
            throw LayerSyncError(.invalidArgument, "the report ids must be a JSON array of strings")
        }
        var ids: [String] = []
        for item in items {
            guard let id = item.stringValue else { throw LayerSyncError(.invalidArgument, "the report ids must be a JSON array of strings") }
            ids.append(id)
        }
        return try acknowledgeRejectedChanges(ids: ids)
    }

    /// Throws unless the store can be read (not removed, not waiting for a database reset).
    private func requireReadableStore() throws(LayerSyncError) {
        if isInvalid { throw LayerSyncError(.invalidState, "the document's local storage was removed", documentID: documentID) }
        if store.needsDatabaseReset {
            throw LayerSyncError(.contentMigrationNeeded,
                                 "the local layer store has a newer schema than this library; call attemptContentMigration() to reset it",
                                 documentID: documentID)
        }
    }
}
