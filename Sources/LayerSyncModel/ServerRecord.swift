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
    /// `createdBy`: the JWT `user_id` that created the record (`nil`: none, or a tombstone).
    package var createdBy: String?
    /// `updatedBy`: the JWT `user_id` of the last change.
    package var updatedBy: String?
    /// `group`: the record's group (collaboration permissions).
    package var group: String?

    /// Creates a record.
    package init(id: String, revision: Int64, deleted: Bool, content: JSONValue?, createdBy: String? = nil,
                 updatedBy: String? = nil, group: String? = nil) {
        self.id = id
        self.revision = revision
        self.deleted = deleted
        self.content = content
        self.createdBy = createdBy
        self.updatedBy = updatedBy
        self.group = group
    }

    /// The ownership the collaboration permissions judge the record by.
    package var ownership: RecordOwnership {
        RecordOwnership(type: content?["type"]?.stringValue, createdBy: createdBy, group: group)
    }

    /// Decodes and checks `{"id", "revision", "deleted", "content"}` (and the ownership
    /// siblings `createdBy`, `updatedBy`, `group`, kept when they are strings) (protocol.md "Record
    /// shape", "What a client checks"): `id` a record id, `revision` an integer 0..2^63-1,
    /// `deleted` a boolean, `content` an object whose `id` is the record's `id` (a live
    /// record), or `null` (a tombstone; any other content of a tombstone is ignored).
    /// - Parameters:
    ///   - json: The record object.
    ///   - name: Where the record is in its answer, for messages.
    /// - Throws: `.invalidServerData` saying which field is missing, ill-typed or wrong.
    package init(json: JSONValue, name: String = "record") throws(LayerSyncError) {
        let fields = try AnswerFields(json, name: name)
        let id = try fields.recordID("id")
        let revision = try fields.revision("revision")
        let deleted = try fields.bool("deleted")
        let content = json["content"]
        if !deleted {
            guard let content, content.objectValue != nil else {
                throw fields.invalid("live record \(id) without object content", recordID: id)
            }
            guard content["id"]?.stringValue == id else {
                throw fields.invalid("record \(id) has content.id \(content["id"]?.jsonText ?? "(missing)"), not its id",
                                     recordID: id)
            }
        }
        // Ownership siblings (protocol.md "Record shape"): strings or null; a live record's only.
        self.init(id: id, revision: revision, deleted: deleted, content: deleted ? nil : content,
                  createdBy: deleted ? nil : json["createdBy"]?.stringValue, updatedBy: deleted ? nil : json["updatedBy"]?.stringValue,
                  group: deleted ? nil : json["group"]?.stringValue)
    }

    /// The content as compact JSON text, `nil` for a tombstone.
    package var contentText: String? { deleted ? nil : content?.jsonText }
}
