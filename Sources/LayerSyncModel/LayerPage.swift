/// A page of a layer: the answer of `GET .../records` and `GET .../changes` (protocol.md).
package struct LayerPage: Sendable {
    package var epoch: String
    package var revision: Int64
    package var records: [ServerRecord]
    package var hasMore: Bool
    package var nextSince: Int64
    /// `regranted` (only asked for by a reauthentication with other collaboration permissions:
    /// `previous_permissions`): records at revisions up to `since` that appear (whole) or
    /// disappear (bare tombstones) for the new token. Empty when not asked for.
    package var regranted: [ServerRecord] = []

    /// Creates a page.
    init(epoch: String, revision: Int64, records: [ServerRecord], hasMore: Bool, nextSince: Int64) {
        self.epoch = epoch
        self.revision = revision
        self.records = records
        self.hasMore = hasMore
        self.nextSince = nextSince
    }

    /// Decodes `{"epoch", "revision", "records", "has_more", "next_since"}` and checks it
    /// against the request it answers (protocol.md "What a client checks"): every key present
    /// and typed; revisions within 0..2^63-1; the layer revision not below `since` when the
    /// epoch is the one the client holds; the records valid, above `since`, in ascending
    /// revision order, each once; with `has_more`, `next_since` the last record's revision.
    /// - Parameters:
    ///   - body: The answer's body.
    ///   - since: The `since` of the request.
    ///   - epoch: The epoch the client holds for the layer, `nil` when it holds none (then the
    ///     revision is not compared with `since`: a new epoch starts its revisions again).
    ///   - regranted: Whether the request asked for `regranted` (then it must be an array of
    ///     records at revisions up to `since`, each id once).
    /// - Throws: `.invalidServerData` saying what was wrong; nothing of such a page may be applied.
    package init(body: [UInt8], since: Int64, epoch knownEpoch: String?, regranted: Bool = false) throws(LayerSyncError) {
        try self.init(fields: try AnswerFields(body: body, name: "layer page (since=\(since))"), since: since, epoch: knownEpoch,
                      regranted: regranted)
    }

    /// Decodes and checks a page already parsed: the `changes` event of the change stream
    /// (protocol version 2), whose data holds the same keys (besides its own) and gets the same checks.
    /// - Parameters:
    ///   - json: The event's data.
    ///   - since: The `since` the page follows (the layer's cursor).
    ///   - epoch: The epoch the client holds, as in ``init(body:since:epoch:regranted:)``.
    /// - Throws: `.invalidServerData` saying what was wrong.
    package init(json: JSONValue, since: Int64, epoch knownEpoch: String?) throws(LayerSyncError) {
        try self.init(fields: try AnswerFields(json, name: "change stream page (since=\(since))"), since: since, epoch: knownEpoch,
                      regranted: false)
    }

    private init(fields: AnswerFields, since: Int64, epoch knownEpoch: String?, regranted: Bool) throws(LayerSyncError) {
        let epoch = try fields.epoch("epoch")
        let revision = try fields.revision("revision")
        let items = try fields.array("records")
        let hasMore = try fields.bool("has_more")
        let nextSince = try fields.revision("next_since")
        if let behind = fields.cursorAhead(revision: revision, epoch: epoch, since: since, knownEpoch: knownEpoch) { throw behind }
        let records = try fields.records(items, key: "records", since: since, revision: revision)
        try fields.checkPaging(hasMore: hasMore, nextSince: nextSince, since: since, records: records, key: "records")
        self.init(epoch: epoch, revision: revision, records: records, hasMore: hasMore, nextSince: nextSince)
        if regranted {
            var ids = Set<String>()
            for (index, item) in try fields.array("regranted").enumerated() {
                let record = try ServerRecord(json: item, name: "layer page (since=\(since)): regranted[\(index)]")
                guard record.revision <= since, ids.insert(record.id).inserted else {
                    throw fields.invalid("regranted[\(index)] has revision \(record.revision) above the since \(since) or its id twice",
                                         recordID: record.id)
                }
                self.regranted.append(record)
            }
        }
    }
}

/// The answer of `POST /sync/v2/stream/{id}/subscriptions` (protocol.md "Protocol version 2"):
/// `{"subscribed": true, "revision", "epoch"}`, with `"ack": true` when the server pushes a
/// `subscribed` event for it on the stream, `"reset": true` when it sent `reset` instead.
package struct SubscriptionAnswer: Sendable {
    package var revision: Int64
    package var epoch: String
    /// Whether a `subscribed` event for this subscription follows on the stream.
    package var acknowledged: Bool
    /// Whether the server sent `reset` instead of subscribing (the epoch subscribed with is not the layer's).
    package var reset: Bool
    /// Set when the layer revision is below the `since` subscribed from in the epoch held: the
    /// rule that refuses such a page (``LayerPage``); the client's cursor is ahead of the server.
    package var cursorAhead: LayerSyncError?

    /// Decodes the answer to a subscription from `since` with the epoch `knownEpoch` held.
    /// - Throws: `.invalidServerData` for an answer that is not such an object.
    package init(body: [UInt8], since: Int64, epoch knownEpoch: String?) throws(LayerSyncError) {
        let fields = try AnswerFields(body: body, name: "subscription answer (since=\(since))")
        guard try fields.bool("subscribed") else { throw fields.invalid("\"subscribed\" is not true") }
        revision = try fields.revision("revision")
        epoch = try fields.epoch("epoch")
        acknowledged = fields.json["ack"]?.boolValue == true
        reset = fields.json["reset"]?.boolValue == true
        cursorAhead = reset ? nil : fields.cursorAhead(revision: revision, epoch: epoch, since: since, knownEpoch: knownEpoch)
    }
}
