/// A page of `GET .../deleted` (protocol.md): the layer's tombstones, each with the content
/// of its newest kept live version.
package struct DeletedPage: Sendable {
    /// A deleted record that `restore` can bring back.
    package struct Entry: Sendable, Equatable {
        /// The record id.
        package var id: String
        /// The revision of the tombstone.
        package var revision: Int64
        /// The newest kept live content (an object whose `id` is ``id``), `nil` when none is kept.
        package var lastContent: JSONValue?
    }

    package var epoch: String
    package var revision: Int64
    package var entries: [Entry]
    package var hasMore: Bool
    package var nextSince: Int64

    /// Decodes `{"epoch", "revision", "records", "has_more", "next_since"}` whose records are
    /// tombstones with `last_content`, and checks it like a ``LayerPage`` (protocol.md "What a
    /// client checks"): every key present and typed, revisions within 0..2^63-1, records above
    /// `since`, at most the layer revision, ascending, each once, paging moving forward; and
    /// each record a tombstone (`deleted` true) whose `last_content` is present, `null` or an object
    /// whose `id` is the record's id. With `epoch` (the epoch of the pages before), the page
    /// must have the same epoch: a list is never stitched together from two epochs.
    /// - Parameters:
    ///   - body: The answer's body.
    ///   - since: The `since` of the request.
    ///   - epoch: The epoch of the earlier pages of the same list, `nil` for the first page.
    /// - Throws: `.invalidServerData` saying what was wrong.
    package init(body: [UInt8], since: Int64, epoch earlierEpoch: String?) throws(LayerSyncError) {
        let fields = try AnswerFields(body: body, name: "deleted page (since=\(since))")
        let epoch = try fields.epoch("epoch")
        let revision = try fields.revision("revision")
        let items = try fields.array("records")
        let hasMore = try fields.bool("has_more")
        let nextSince = try fields.revision("next_since")
        if let earlierEpoch, earlierEpoch != epoch {
            throw fields.invalid("the epoch \(epoch) differs from the one of the pages before (\(earlierEpoch))")
        }
        let records = try fields.records(items, key: "records", since: since, revision: revision)
        try fields.checkPaging(hasMore: hasMore, nextSince: nextSince, since: since, records: records, key: "records")
        var entries: [Entry] = []
        entries.reserveCapacity(records.count)
        for (index, record) in records.enumerated() {
            guard record.deleted else {
                throw fields.invalid("records[\(index)]: record \(record.id) is not a tombstone", recordID: record.id)
            }
            var lastContent: JSONValue?
            guard let content = items[index]["last_content"] else {
                throw fields.invalid("records[\(index)]: \"last_content\" of \(record.id) is missing", recordID: record.id)
            }
            if !content.isNull {
                guard content.objectValue != nil, content["id"]?.stringValue == record.id else {
                    throw fields.invalid("records[\(index)]: last_content of \(record.id) is not an object with that id",
                                         recordID: record.id)
                }
                lastContent = content
            }
            entries.append(Entry(id: record.id, revision: record.revision, lastContent: lastContent))
        }
        self.epoch = epoch
        self.revision = revision
        self.entries = entries
        self.hasMore = hasMore
        self.nextSince = nextSince
    }
}
