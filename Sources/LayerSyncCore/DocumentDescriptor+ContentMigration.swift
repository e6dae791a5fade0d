import LayerSyncModel
import LayerSyncStore
import LayerSyncTransport
import Synchronization

/// Instant's content migration (`InstantDocumentDescriptor.attemptContentMigration()`).
extension DocumentDescriptor {
    /// Migrates the local records to the current content format when the state is
    /// `.needsContentMigration`; otherwise does nothing. Runs on the calling thread, in one
    /// SQLite transaction: the state is `.migratingContent` meanwhile (record calls and sync
    /// cycles are refused with `.performingContentMigration`), then `.clean` or `.dirty`; each
    /// transition is reported once. Records whose visible content changed are reported through
    /// `didReceiveChanges` (as updated).
    ///
    /// In state `.needsResetForDatabaseMigration` (the local store has a schema newer than this
    /// library) it returns at once and resets the store on the work queue: state
    /// `.resettingForDatabaseMigration` (record calls refused with `.performingContentMigration`);
    /// the pending local changes readable from the old store are salvaged (unreadable ones are
    /// reported through `didResetLayer` with `.databaseAccessFailed`, the old file is kept as
    /// `layer.sqlite.schema-N.bak`), the store is recreated, the snapshot downloaded again and the
    /// salvaged changes re-queued in one transaction; then `.clean` or `.dirty`. A failure ends in
    /// `.needsResetForDatabaseMigration` again with `didFailSync`; the salvaged changes stay on
    /// disk (`layer.salvage.json`) for the next attempt.
    /// - Throws: `.performingContentMigration` when another migration of this layer runs,
    ///   `.invalidState` after storage removal, `.databaseAccessFailed` (nothing changed).
    public func attemptContentMigration() throws(LayerSyncError) {
        if isInvalid { throw LayerSyncError(.invalidState, "the document's local storage was removed", documentID: documentID) }
        if store.needsDatabaseReset || isResettingDatabase {
            startDatabaseReset()
            return
        }
        guard store.needsContentMigration else { return }
        let busy = mutableState.withLock { state -> Bool in
            if state.migratingContent { return true }
            state.migratingContent = true
            return false
        }
        if busy { throw LayerSyncError(.performingContentMigration, "a content migration is running", documentID: documentID) }
        publishState()
        defer {
            mutableState.withLock { $0.migratingContent = false }
            publishState()
        }
        Self.contentMigrationWillRun.withLock { $0 }?(self)
        let before = Set(try store.listRecords(filter: LayerStore.RecordFilter()))
        do {
            try store.migrateContent()
        } catch {
            throw error.with(documentID: documentID)
        }
        var changes = RecordChanges()
        for text in try store.listRecords(filter: LayerStore.RecordFilter()) where !before.contains(text) {
            if let id = try? JSONValue.parse(text)["id"]?.stringValue { changes.updated.append(id) }
        }
        if !changes.isEmpty { emit(.didReceiveChanges(self, changes)) }
    }
}

extension DocumentDescriptor {
    /// Whether the reset for a database migration runs.
    var isResettingDatabase: Bool { mutableState.withLock { $0.resettingDatabase } }

    /// Starts the reset for a database migration on the work queue (no-op while one runs).
    func startDatabaseReset() {
        let cancellation = TransferCancellation()
        let started = mutableState.withLock { state -> Bool in
            if state.resettingDatabase { return false }
            state.resettingDatabase = true
            state.operation = cancellation
            return true
        }
        guard started else { return }
        publishState()
        workQueue.async { [self] in runDatabaseReset(cancellation) }
    }

    private func runDatabaseReset(_ cancellation: TransferCancellation) {
        let token = jwt
        do throws(LayerSyncError) {
            let (edits, loss) = try store.salvageAndMoveAside()
            if let loss { emit(.didResetLayer(self, loss.with(documentID: documentID))) }
            try store.installFreshDatabase()
            if let user = mutableState.withLock({ $0.authentication.claims.userID }) { try store.setMeta("user_id", user) }
            try store.setMeta("document_id", documentID)
            try store.setMeta("layer_name", layerName)
            _ = try downloadSnapshot(token: token, cancellation: cancellation, reportChanges: false)
            try store.requeueSalvaged(edits)
            mutableState.withLock { state in
                state.resettingDatabase = false
                if state.operation === cancellation { state.operation = nil }
            }
            publishState()
            if hasUnsyncedChanges { scheduleAutoSync() }
        } catch {
            store.abandonReset()
            mutableState.withLock { state in
                state.resettingDatabase = false
                if state.operation === cancellation { state.operation = nil }
            }
            publishState()
            emit(.didFailSync(self, error.with(documentID: documentID)))
            if error.code == .accessDenied, error.httpStatus != nil { noteAuthenticationFailure(error, token: token) }
        }
    }
}

extension DocumentDescriptor {
    /// Test hook: called after the state became `.migratingContent`, before the records are
    /// rewritten (lets a test observe the running migration deterministically).
    static let contentMigrationWillRun = Mutex<(@Sendable (DocumentDescriptor) -> Void)?>(nil)
}
