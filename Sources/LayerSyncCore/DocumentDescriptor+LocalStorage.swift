import LayerSyncModel
import LayerSyncStore

/// Removing a layer's local storage (Instant's `InstantDocumentDescriptor.removeLocalStorage()`).
extension DocumentDescriptor {
    /// Removes this layer's local store (records, pending changes) and, when no other layer of
    /// the document is stored, the document's PDF and attachments. Running transfers are
    /// cancelled first and the call waits until they have stopped. Afterwards the descriptor
    /// is in state `.invalid` (reported once through `didChangeSyncState`): every call on it
    /// fails with `.invalidState`; ``SyncClient/document(forJWT:)`` hands out a fresh
    /// descriptor for the same layer. Unsynced local changes are lost: this is the one
    /// operation that drops them, on purpose.
    /// - Throws: `.couldNotRemoveDiskCacheEntries` when a file cannot be removed.
    public func removeLocalStorage() throws(LayerSyncError) {
        mutableState.withLock { $0.invalid = true }
        cancelAllWork()
        waitUntilIdle()
        store.close()
        publishState()
        let layers = context.layout.documentDirectory(documentID) + "/layers"
        try StorageLayout.removeTree(store.directory)
        if StorageLayout.entries(layers).isEmpty {
            try StorageLayout.removeTree(context.layout.documentDirectory(documentID))
        }
    }

    /// Marks the descriptor invalid after its storage was removed by the client.
    func invalidate() {
        mutableState.withLock { $0.invalid = true }
        cancelAllWork()
        waitUntilIdle()
        store.close()
        publishState()
    }

    /// Throws `.invalidState` once the local storage was removed (for calls that change the
    /// descriptor without touching the store: sync delay, observers).
    public func requireValid() throws(LayerSyncError) {
        if isInvalid { throw LayerSyncError(.invalidState, "the document's local storage was removed", documentID: documentID) }
    }

    /// The downloaded PDF's path.
    /// - Throws: `.invalidState` after storage removal, `.notDownloaded` before the download.
    public func requirePDFPath() throws(LayerSyncError) -> String {
        try requireValid()
        guard let path = pdfPath else {
            throw LayerSyncError(.notDownloaded, "the document is not downloaded", documentID: documentID)
        }
        return path
    }

    /// Sets ``syncDelay``.
    /// - Throws: `.invalidArgument` for a delay that is not finite, or negative other than
    ///   `-1` (automatic sync off); `.invalidState` after storage removal.
    public func setSyncDelay(_ delay: Double) throws(LayerSyncError) {
        try requireValid()
        guard delay.isFinite, delay >= 0 || delay == -1 else {
            throw LayerSyncError(.invalidArgument, "delay_s must be >= 0 or LAYERSYNC_SYNC_DISABLED")
        }
        syncDelay = delay
    }
}
