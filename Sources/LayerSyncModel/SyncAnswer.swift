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

    /// What the answered request claimed and carried: the context an answer is checked
    /// against (``init(body:request:)``).
    package struct Request: Sendable {
        /// The `epoch` sent (`nil` for `null`: a fresh store).
        package var epoch: String?
        /// The `since` sent.
        package var since: Int64
        /// The record id of each change id sent.
        package var changes: [String: String]

        /// Creates the context of a request.
        /// - Parameters:
        ///   - epoch: The `epoch` sent.
        ///   - since: The `since` sent.
        ///   - changes: The (change id, record id) of each change sent.
        package init(epoch: String?, since: Int64, changes: [(changeID: String, recordID: String)]) {
            self.epoch = epoch
            self.since = since
            self.changes = Dictionary(changes.map { ($0.changeID, $0.recordID) }, uniquingKeysWith: { first, _ in first })
        }
    }

    /// Decodes `{"epoch", "revision", "epoch_changed", "accepted", "rejected", "changes",
    /// "has_more", "next_since"}` and checks it against the request it answers (protocol.md
    /// "What a client checks"): every key present and typed; revisions within 0..2^63-1; the
    /// layer revision not below the `since` sent (same epoch); the epoch the one sent unless
    /// `epoch_changed` (which then comes with nothing else); each accepted or rejected entry
    /// naming a change id of the request, once, with that change's record id, and a revision
    /// not above the layer's; `changes` valid records above `since`, in ascending revision
    /// order, each once; with `has_more`, `next_since` the last change's revision.
    /// - Parameters:
    ///   - body: The answer's body.
    ///   - request: What the request sent.
    /// - Throws: `.invalidServerData` saying what was wrong; nothing of such an answer may be applied.
    package init(body: [UInt8], request: Request) throws(LayerSyncError) {
        let fields = try AnswerFields(body: body, name: "sync answer")
        let epoch = try fields.epoch("epoch")
        let revision = try fields.revision("revision")
        let epochChanged = try fields.bool("epoch_changed")
        let acceptedItems = try fields.array("accepted")
        let rejectedItems = try fields.array("rejected")
        let changeItems = try fields.array("changes")
        let hasMore = try fields.bool("has_more")
        let nextSince = try fields.revision("next_since")
        if epochChanged {
            guard let sent = request.epoch, sent != epoch else {
                throw fields.invalid("\"epoch_changed\" is true but the epoch \(epoch) is not a change from the one sent "
                                     + "(\(request.epoch ?? "null"))")
            }
            guard acceptedItems.isEmpty, rejectedItems.isEmpty, changeItems.isEmpty, !hasMore else {
                throw fields.invalid("\"epoch_changed\" is true but the answer applied or returned something")
            }
            self.init(epoch: epoch, revision: revision, epochChanged: true, accepted: [], rejected: [], changes: [],
                      hasMore: false, nextSince: nextSince)
            return
        }
        if let sent = request.epoch, sent != epoch {
            throw fields.invalid("the epoch \(epoch) differs from the one sent (\(sent)) but \"epoch_changed\" is false")
        }
        if request.epoch != nil, revision < request.since {
            throw fields.invalid("the layer revision \(revision) is below the since \(request.since) sent (same epoch)")
        }
        var answered = Set<String>()
        /// The entry's change id, which must be one the request sent and not answered before.
        func sentChange(_ entry: AnswerFields) throws(LayerSyncError) -> (changeID: String, recordID: String) {
            let changeID = try entry.string("change_id")
            guard let recordID = request.changes[changeID] else {
                throw entry.invalid("change id \(changeID) was not sent in this request")
            }
            guard answered.insert(changeID).inserted else { throw entry.invalid("change id \(changeID) is answered twice") }
            return (changeID, recordID)
        }
        var accepted: [Accepted] = []
        accepted.reserveCapacity(acceptedItems.count)
        for (index, item) in acceptedItems.enumerated() {
            let entry = try AnswerFields(item, name: "sync answer: accepted[\(index)]")
            let (changeID, recordID) = try sentChange(entry)
            guard try entry.recordID("id") == recordID else {
                throw entry.invalid("names record \(item["id"]?.stringValue ?? "") but change \(changeID) was for \(recordID)",
                                    recordID: recordID)
            }
            let acceptedRevision = try entry.revision("revision")
            guard acceptedRevision <= revision else {
                throw entry.invalid("revision \(acceptedRevision) is above the layer revision \(revision)", recordID: recordID)
            }
            accepted.append(Accepted(changeID: changeID, recordID: recordID, revision: acceptedRevision))
        }
        var rejected: [Rejected] = []
        for (index, item) in rejectedItems.enumerated() {
            let entry = try AnswerFields(item, name: "sync answer: rejected[\(index)]")
            let (changeID, recordID) = try sentChange(entry)
            // `id` is null when the change's id was not a valid record id (protocol.md).
            if let named = try entry.optionalString("id"), named != recordID {
                throw entry.invalid("names record \(named) but change \(changeID) was for \(recordID)", recordID: recordID)
            }
            let reason = try entry.string("reason")
            var serverRecord: ServerRecord?
            if let record = item["server_record"], !record.isNull {
                let server = try ServerRecord(json: record, name: "sync answer: rejected[\(index)].server_record")
                guard server.id == recordID else {
                    throw entry.invalid("server_record is record \(server.id), not \(recordID)", recordID: recordID)
                }
                guard server.revision <= revision else {
                    throw entry.invalid("server_record revision \(server.revision) is above the layer revision \(revision)",
                                        recordID: recordID)
                }
                serverRecord = server
            }
            rejected.append(Rejected(changeID: changeID, recordID: recordID, reason: reason, serverRecord: serverRecord))
        }
        let changes = try fields.records(changeItems, key: "changes", since: request.since, revision: revision)
        try fields.checkPaging(hasMore: hasMore, nextSince: nextSince, since: request.since, records: changes, key: "changes")
        self.init(epoch: epoch, revision: revision, epochChanged: false, accepted: accepted, rejected: rejected,
                  changes: changes, hasMore: hasMore, nextSince: nextSince)
    }
}
