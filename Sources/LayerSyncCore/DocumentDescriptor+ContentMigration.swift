import Synchronization

/// Instant's content migration (`InstantDocumentDescriptor.attemptContentMigration()`).
extension DocumentDescriptor {
    /// Migrates the local records to the current content format when the state is
    /// `.needsContentMigration`; otherwise does nothing. Runs on the calling thread, in one
    /// SQLite transaction: the state is `.migratingContent` meanwhile (record calls and sync
    /// cycles are refused with `.performingContentMigration`), then `.clean` or `.dirty`; each
    /// transition is reported once. Records whose visible content changed are reported through
    /// `didReceiveChanges` (as updated).
    /// - Throws: `.performingContentMigration` when another migration of this layer runs,
    ///   `.invalidState` after storage removal, `.databaseAccessFailed` (nothing changed).
    public func attemptContentMigration() throws(LayerSyncError) {
        if isInvalid { throw LayerSyncError(.invalidState, "the document's local storage was removed", documentID: documentID) }
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
    /// Test hook: called after the state became `.migratingContent`, before the records are
    /// rewritten (lets a test observe the running migration deterministically).
    static let contentMigrationWillRun = Mutex<(@Sendable (DocumentDescriptor) -> Void)?>(nil)
}
