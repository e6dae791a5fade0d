import LayerSyncModel

/// A local change waiting in the store's queue, in the form the sync cycle sends it.
///
/// Once sent (attempted) a change is frozen: its `payload` — the exact JSON of the
/// change in the request — never changes, so a retry after a lost response is
/// byte-identical and carries the same change id (protocol.md: the server applies each
/// change id at most once). The payload is not stored: it is computed from the queue row
/// (change id, operation, record id, base revision, content), none of which changes once
/// the row was sent (later edits of the record get a row of their own).
///
/// Column `attempted`: 0 = not sent, later edits of the record coalesce into the row; 1 =
/// frozen (sent, or about to be), `base_revision` fixed; 2 = sealed when the store opened
/// because it may have been sent before a power loss undid its freeze (see
/// ``LayerStore/sealPendingChanges(_:)``): later edits get a row of their own, and its base
/// revision is fixed when it is frozen for sending, as for an unsent change.
package struct PendingChange: Sendable, Equatable {
    /// The operation of a change.
    enum Operation: String, Sendable {
        case create, update, delete
    }

    /// Queue position (SQLite `AUTOINCREMENT`).
    var sequence: Int64
    /// The change id (a ULID).
    package var changeID: String
    /// The record it changes.
    package var recordID: String
    /// What it does.
    var operation: Operation
    /// The change as JSON text: `{"change_id","op","id"[,"base_revision"][,"content"]}`.
    package var payload: String
    /// Where the change's content is in `payload` (offsets of its UTF-8 bytes) when it went in
    /// as stored; `nil` otherwise (no content, content sent as `null`, or a payload an earlier
    /// version stored). Lets an accepted change record its content without reading the row again.
    var contentRange: Range<Int>? = nil
}

/// What applying a server answer changed locally.
package struct ServerChangeOutcome: Sendable {
    /// Records changed by the server, for `didReceiveChanges`.
    package var changes = RecordChanges()
    /// Local changes that lost, for `didRejectChanges`.
    package var rejections: [RejectedChange] = []
    /// Records whose unsynced local changes were re-based onto a new layer snapshot
    /// (epoch changed), for `didResetLayer`.
    package var rebased: [String] = []

    /// Nothing changed.
    package init() {}

    /// Appends another outcome.
    package mutating func merge(_ other: ServerChangeOutcome) {
        changes.created += other.changes.created
        changes.updated += other.changes.updated
        changes.deleted += other.changes.deleted
        rejections += other.rejections
        rebased += other.rebased
    }
}
