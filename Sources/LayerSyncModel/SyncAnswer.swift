/// The answer of `POST .../sync` (protocol.md): what became of the changes sent, and the
/// server's changes since the request's `since`.
package struct SyncAnswer: Sendable {
    /// An accepted change: it is now the record's server version at `revision`.
    package struct Accepted: Sendable {
        package var changeID: String
        package var recordID: String
        package var revision: Int64
    }

    /// A rejected change, with the server's version of the record (`nil` when it has none).
    package struct Rejected: Sendable {
        package var changeID: String
        package var recordID: String
        package var reason: String
        package var serverRecord: ServerRecord?
    }

    package var epoch: String
    package var revision: Int64
    package var epochChanged: Bool
    package var accepted: [Accepted]
    package var rejected: [Rejected]
    package var changes: [ServerRecord]
    package var hasMore: Bool
    package var nextSince: Int64

    /// Creates an answer.
    init(epoch: String, revision: Int64, epochChanged: Bool, accepted: [Accepted], rejected: [Rejected],
         changes: [ServerRecord], hasMore: Bool, nextSince: Int64) {
        self.epoch = epoch
        self.revision = revision
        self.epochChanged = epochChanged
        self.accepted = accepted
        self.rejected = rejected
        self.changes = changes
        self.hasMore = hasMore
        self.nextSince = nextSince
    }

    /// Decodes `{"epoch", "revision", "epoch_changed", "accepted", "rejected", "changes",
    /// "has_more", "next_since"}`.
    /// - Parameter body: The answer's body.
    /// - Throws: `.invalidServerData` when it is not such an object or an entry is malformed.
    package init(body: [UInt8]) throws(LayerSyncError) {
        guard let json = try? JSONValue.parse(bytes: body), let epoch = json["epoch"]?.stringValue,
              let revision = json["revision"]?.int64Value else {
            throw LayerSyncError(.invalidServerData, "sync answer without epoch/revision")
        }
        var accepted: [Accepted] = []
        for item in json["accepted"]?.arrayValue ?? [] {
            guard let changeID = item["change_id"]?.stringValue, let id = item["id"]?.stringValue,
                  let revision = item["revision"]?.int64Value else {
                throw LayerSyncError(.invalidServerData, "malformed accepted entry")
            }
            accepted.append(Accepted(changeID: changeID, recordID: id, revision: revision))
        }
        var rejected: [Rejected] = []
        for item in json["rejected"]?.arrayValue ?? [] {
            guard let changeID = item["change_id"]?.stringValue, let id = item["id"]?.stringValue else {
                throw LayerSyncError(.invalidServerData, "malformed rejected entry")
            }
            var serverRecord: ServerRecord?
            if let record = item["server_record"], !record.isNull { serverRecord = try ServerRecord(json: record) }
            rejected.append(Rejected(changeID: changeID, recordID: id, reason: item["reason"]?.stringValue ?? "conflict",
                                     serverRecord: serverRecord))
        }
        var changes: [ServerRecord] = []
        for item in json["changes"]?.arrayValue ?? [] { changes.append(try ServerRecord(json: item)) }
        self.init(epoch: epoch, revision: revision, epochChanged: json["epoch_changed"]?.boolValue ?? false,
                  accepted: accepted, rejected: rejected, changes: changes,
                  hasMore: json["has_more"]?.boolValue ?? false,
                  nextSince: json["next_since"]?.int64Value ?? revision)
    }
}
