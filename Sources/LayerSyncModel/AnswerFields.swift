/// Typed access to one JSON object of a server answer, for the decoders of the wire
/// messages (``SyncAnswer``, ``LayerPage``, ``ServerRecord``, ``ServerInfo``): the one place
/// where what arrives from the network is checked before anything of it is used
/// (protocol.md "What a client checks").
///
/// Every accessor throws `.invalidServerData` whose message names the answer, the key and
/// what was wrong with it, e.g. `sync answer: "changes" is missing`.
struct AnswerFields {
    /// The largest revision, `since` or `next_since` (protocol.md: 0..2^63-1).
    static let maximumRevision = Int64.max

    /// The object.
    let json: JSONValue
    /// What the object is, for messages (`"sync answer"`, `"changes[3]"`).
    let name: String

    /// Parses an answer's body, which must be a JSON object.
    /// - Parameters:
    ///   - body: The bytes received.
    ///   - name: What the answer is, for messages.
    /// - Throws: `.invalidServerData` for a body that is not JSON (e.g. truncated) or not an object.
    init(body: [UInt8], name: String) throws(LayerSyncError) {
        guard let json = try? JSONValue.parse(bytes: body) else {
            throw LayerSyncError(.invalidServerData, "\(name): the body (\(body.count) bytes) is not JSON")
        }
        try self.init(json, name: name)
    }

    /// Wraps a value that must be a JSON object.
    /// - Throws: `.invalidServerData` when it is not one.
    init(_ json: JSONValue, name: String) throws(LayerSyncError) {
        guard json.objectValue != nil else { throw LayerSyncError(.invalidServerData, "\(name): not a JSON object") }
        self.json = json
        self.name = name
    }

    /// protocol.md "What a client checks": in the epoch the client holds, a layer's revision is
    /// never below the `since` it asked from. An answer that says so means the client's cursor is
    /// ahead of the server's layer (a server restored from a backup, or a garbled earlier
    /// answer): the client re-bases (`rebaseIfCursorIsAheadOfServer`). One rule for pages and
    /// subscription answers.
    /// - Returns: The error refusing the answer, `nil` when it passes.
    func cursorAhead(revision: Int64, epoch: String, since: Int64, knownEpoch: String?) -> LayerSyncError? {
        guard epoch == knownEpoch, revision < since else { return nil }
        return invalid("the layer revision \(revision) is below the since \(since) asked for (same epoch)")
    }

    /// An error about this object.
    func invalid(_ problem: String, recordID: String? = nil) -> LayerSyncError {
        LayerSyncError(.invalidServerData, "\(name): \(problem)", recordID: recordID)
    }

    private func required(_ key: String) throws(LayerSyncError) -> JSONValue {
        guard let value = json[key] else { throw invalid("\"\(key)\" is missing") }
        return value
    }

    /// A required string.
    func string(_ key: String) throws(LayerSyncError) -> String {
        guard let value = try required(key).stringValue else { throw invalid("\"\(key)\" is not a string") }
        return value
    }

    /// An optional string (absent or `null` give `nil`).
    func optionalString(_ key: String) throws(LayerSyncError) -> String? {
        guard let value = json[key], !value.isNull else { return nil }
        guard let text = value.stringValue else { throw invalid("\"\(key)\" is not a string") }
        return text
    }

    /// A required layer epoch: an opaque string (the reference server's are UUIDs) of the
    /// shape of an id (1..128 characters, no control characters), so that an empty, huge or
    /// control-garbled epoch is refused like any ill-typed field instead of looking like an
    /// epoch change (protocol.md "What a client checks").
    func epoch(_ key: String) throws(LayerSyncError) -> String {
        let epoch = try string(key)
        guard Self.isValidID(epoch) else { throw invalid("\"\(key)\" is not a valid epoch (1..128 characters, no control characters)") }
        return epoch
    }

    /// A required bool.
    func bool(_ key: String) throws(LayerSyncError) -> Bool {
        guard let value = try required(key).boolValue else { throw invalid("\"\(key)\" is not a boolean") }
        return value
    }

    /// A required array.
    func array(_ key: String) throws(LayerSyncError) -> [JSONValue] {
        guard let value = try required(key).arrayValue else { throw invalid("\"\(key)\" is not an array") }
        return value
    }

    /// A required revision: an integer in 0...2^63-1.
    func revision(_ key: String) throws(LayerSyncError) -> Int64 {
        try Self.revision(try required(key), key: key, in: self)
    }

    /// A required non-negative integer (a count or a size) that fits an `Int64`.
    func count(_ key: String) throws(LayerSyncError) -> Int64 { try revision(key) }

    static func revision(_ value: JSONValue, key: String, in fields: AnswerFields) throws(LayerSyncError) -> Int64 {
        guard case .number(let text) = value, let number = value.int64Value else {
            throw fields.invalid("\"\(key)\" is not an integer 0..2^63-1")
        }
        guard number >= 0 else { throw fields.invalid("\"\(key)\" is negative (\(text))") }
        return number
    }

    /// A required record id (1..128 characters without control characters, protocol.md
    /// Conventions; change ids have the same shape).
    func recordID(_ key: String) throws(LayerSyncError) -> String {
        let id = try string(key)
        guard Self.isValidID(id) else { throw invalid("\"\(key)\" is not a valid id (1..128 characters, no control characters)") }
        return id
    }

    /// Whether `id` is 1..128 Unicode scalars without U+0000..U+001F or U+007F.
    static func isValidID(_ id: String) -> Bool {
        var count = 0
        for scalar in id.unicodeScalars {
            count += 1
            if count > 128 || scalar.value < 0x20 || scalar.value == 0x7F { return false }
        }
        return count > 0
    }

    /// Checks the records of a page or a sync answer's `changes` against what was asked:
    /// each above `since` and at most the answer's `revision`, revisions strictly ascending
    /// (so no revision twice), no record id twice.
    /// - Parameters:
    ///   - items: The raw entries.
    ///   - key: The key they came from, for messages.
    ///   - since: The `since` of the request.
    ///   - revision: The answer's layer revision.
    /// - Returns: The decoded records.
    func records(_ items: [JSONValue], key: String, since: Int64, revision: Int64) throws(LayerSyncError) -> [ServerRecord] {
        var records: [ServerRecord] = []
        records.reserveCapacity(items.count)
        var ids = Set<String>()
        ids.reserveCapacity(items.count)
        var last = since
        for (index, item) in items.enumerated() {
            let record = try ServerRecord(json: item, name: "\(name): \(key)[\(index)]")
            guard record.revision > since else {
                throw invalid("\(key)[\(index)] has revision \(record.revision), not above the since \(since) asked for",
                              recordID: record.id)
            }
            guard record.revision <= revision else {
                throw invalid("\(key)[\(index)] has revision \(record.revision), above the layer revision \(revision)",
                              recordID: record.id)
            }
            guard record.revision > last else {
                throw invalid("\(key)[\(index)] has revision \(record.revision), not above the one before it (\(last)): "
                              + "records must be in ascending revision order, each revision once", recordID: record.id)
            }
            guard ids.insert(record.id).inserted else {
                throw invalid("\(key)[\(index)]: record \(record.id) appears twice", recordID: record.id)
            }
            last = record.revision
            records.append(record)
        }
        return records
    }

    /// Checks the paging fields: with `has_more`, the page holds records and `next_since` is
    /// the revision of the last one (so it moves forward, past `since`).
    func checkPaging(hasMore: Bool, nextSince: Int64, since: Int64, records: [ServerRecord], key: String) throws(LayerSyncError) {
        guard hasMore else { return }
        // Under collaboration permissions the server leaves records the token may not view out
        // of a page (protocol.md "What leaves the server"): a page may then be empty, or end
        // below `next_since` (the last revision the server scanned). The cursor still moves.
        let last = records.last?.revision ?? since
        guard nextSince > since, nextSince >= last else {
            throw invalid("\"next_since\" \(nextSince) with \"has_more\" must be at least the revision of the last record "
                          + "(\(last)) and above the since \(since) asked for")
        }
    }
}
