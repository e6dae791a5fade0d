/// A record as the server sends it (protocol.md "Record shape").
package struct ServerRecord: Sendable, Equatable {
    /// The record id.
    package var id: String
    /// The layer revision at which the record last changed.
    package var revision: Int64
    /// `true` for a tombstone.
    package var deleted: Bool
    /// The Instant JSON object, `nil` for a tombstone.
    package var content: JSONValue?

    /// Creates a record.
    package init(id: String, revision: Int64, deleted: Bool, content: JSONValue?) {
        self.id = id
        self.revision = revision
        self.deleted = deleted
        self.content = content
    }

    /// Decodes `{"id", "revision", "deleted", "content"}`.
    /// - Parameter json: The record object.
    /// - Throws: `.invalidServerData` when a field is missing or ill-typed.
    package init(json: JSONValue) throws(LayerSyncError) {
        guard let id = json["id"]?.stringValue, let revision = json["revision"]?.int64Value else {
            throw LayerSyncError(.invalidServerData, "record without string id / integer revision")
        }
        let deleted = json["deleted"]?.boolValue ?? false
        let content = json["content"]
        if !deleted {
            guard content?.objectValue != nil else {
                throw LayerSyncError(.invalidServerData, "live record \(id) without object content", recordID: id)
            }
        }
        self.init(id: id, revision: revision, deleted: deleted, content: deleted ? nil : content)
    }

    /// The content as compact JSON text, `nil` for a tombstone.
    package var contentText: String? { deleted ? nil : content?.jsonText }
}
