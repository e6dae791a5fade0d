/// A page of a layer: the answer of `GET .../records` and `GET .../changes` (protocol.md).
package struct LayerPage: Sendable {
    package var epoch: String
    package var revision: Int64
    package var records: [ServerRecord]
    package var hasMore: Bool
    package var nextSince: Int64

    /// Creates a page.
    init(epoch: String, revision: Int64, records: [ServerRecord], hasMore: Bool, nextSince: Int64) {
        self.epoch = epoch
        self.revision = revision
        self.records = records
        self.hasMore = hasMore
        self.nextSince = nextSince
    }

    /// Decodes `{"epoch", "revision", "records", "has_more", "next_since"}`.
    /// - Parameter body: The answer's body.
    /// - Throws: `.invalidServerData` when it is not such an object or a record is malformed.
    package init(body: [UInt8]) throws(LayerSyncError) {
        guard let json = try? JSONValue.parse(bytes: body), let epoch = json["epoch"]?.stringValue,
              let revision = json["revision"]?.int64Value, let items = json["records"]?.arrayValue else {
            throw LayerSyncError(.invalidServerData, "layer page without epoch/revision/records")
        }
        var records: [ServerRecord] = []
        records.reserveCapacity(items.count)
        for item in items { records.append(try ServerRecord(json: item)) }
        self.init(epoch: epoch, revision: revision, records: records,
                  hasMore: json["has_more"]?.boolValue ?? false,
                  nextSince: json["next_since"]?.int64Value ?? revision)
    }
}
