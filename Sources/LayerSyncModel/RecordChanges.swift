/// Record ids changed by the server, as reported by `ClientEvent.didReceiveChanges`.
public struct RecordChanges: Sendable, Equatable {
    /// Ids of records that are new in the local store.
    public var created: [String]
    /// Ids of records whose content changed.
    public var updated: [String]
    /// Ids of records that were deleted.
    public var deleted: [String]

    /// Creates a change set.
    /// - Parameters:
    ///   - created: Ids of new records.
    ///   - updated: Ids of changed records.
    ///   - deleted: Ids of deleted records.
    package init(created: [String] = [], updated: [String] = [], deleted: [String] = []) {
        self.created = created
        self.updated = updated
        self.deleted = deleted
    }

    /// `true` when no id is listed.
    public var isEmpty: Bool { created.isEmpty && updated.isEmpty && deleted.isEmpty }
}
