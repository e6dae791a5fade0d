/// A record as the server sends it (protocol.md "Record shape").
struct ServerRecord: Sendable, Equatable {
    /// The record id.
    var id: String
    /// The layer revision at which the record last changed.
    var revision: Int64
    /// `true` for a tombstone.
    var deleted: Bool
    /// The Instant JSON object, `nil` for a tombstone.
    var content: JSONValue?

    /// Creates a record.
    init(id: String, revision: Int64, deleted: Bool, content: JSONValue?) {
        self.id = id
        self.revision = revision
        self.deleted = deleted
        self.content = content
    }

    /// Decodes `{"id", "revision", "deleted", "content"}`.
    /// - Parameter json: The record object.
    /// - Throws: `.invalidServerData` when a field is missing or ill-typed.
    init(json: JSONValue) throws(LayerSyncError) {
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
    var contentText: String? { deleted ? nil : content?.jsonText }
}
