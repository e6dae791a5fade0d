import LayerSyncModel
import LayerSyncStore

/// Local records: Instant JSON strings in and out.
///
/// Errors for every method: `.notDownloaded` before the document is downloaded,
/// `.invalidState` after its storage was removed, `.databaseAccessFailed` if SQLite fails.
/// JSON input: text that does not parse → `.invalidArgument`; parsed JSON that is not a
/// valid record (not an object, missing/ill-typed `type` or `id`) → `.invalidJSONStructure`.
/// Every write is committed (durable) together with its pending change when the call
/// returns, and schedules the debounced automatic sync.
extension DocumentDescriptor {
    /// Creates a record (Instant's `Document.add(annotations:)`).
    /// - Parameter json: An Instant JSON object with a string `type`. A string `id` of 1–128
    ///   characters is kept; without `id` a ULID is assigned. `v` is set to 2 if missing.
    /// - Returns: The stored JSON (with `id` and `v`).
    /// - Throws: `.invalidArgument` (bad JSON text, or a record with that id exists),
    ///   `.invalidJSONStructure`, plus the common errors.
    public func createAnnotation(json: String) throws(LayerSyncError) -> String {
        try requireDownloaded()
        var object = try Self.recordObject(json)
        let id: String
        if let given = object["id"] {
            id = try Self.recordID(given)
        } else {
            id = ULID.generate()
            object["id"] = .string(id)
        }
        if object["v"] == nil { object["v"] = .integer(2) }
        let text = JSONValue.object(object).jsonText
        do {
            try store.createRecord(id: id, content: text)
        } catch {
            throw error.with(documentID: documentID)
        }
        didEditLocally()
        return text
    }

    /// Replaces a record's content.
    /// - Parameter json: The full new Instant JSON object, with the record's `id` and a `type`.
    /// - Returns: The stored JSON.
    /// - Throws: `.noSuchAnnotation` if no live record has the id, `.invalidArgument`,
    ///   `.invalidJSONStructure`, plus the common errors.
    public func updateAnnotation(json: String) throws(LayerSyncError) -> String {
        try requireDownloaded()
        var object = try Self.recordObject(json)
        guard let given = object["id"] else {
            throw LayerSyncError(.invalidJSONStructure, "an update needs the record's \"id\"", documentID: documentID)
        }
        let id = try Self.recordID(given)
        if object["v"] == nil { object["v"] = .integer(2) }
        let text = JSONValue.object(object).jsonText
        do {
            try store.updateRecord(id: id, content: text)
        } catch {
            throw error.with(documentID: documentID)
        }
        didEditLocally()
        return text
    }

    /// Deletes a record and the local comments whose `rootId` is its id.
    /// - Parameter id: The record id.
    /// - Throws: `.noSuchAnnotation`, plus the common errors.
    public func deleteAnnotation(id: String) throws(LayerSyncError) {
        try requireDownloaded()
        do {
            try store.deleteRecord(id: id)
        } catch {
            throw error.with(documentID: documentID)
        }
        didEditLocally()
    }

    /// A record's content.
    /// - Parameter id: The record id.
    /// - Returns: The Instant JSON text.
    /// - Throws: `.noSuchAnnotation`, plus the common errors.
    public func annotation(id: String) throws(LayerSyncError) -> String {
        try requireDownloaded()
        guard let text = try store.record(id: id) else {
            throw LayerSyncError(.noSuchAnnotation, "no annotation with id \(id)", documentID: documentID, recordID: id)
        }
        return text
    }

    /// Live records, in creation order.
    /// - Parameter filterJSON: `nil`, or an object with optional keys `pageIndex` (integer;
    ///   alias `page`), `type` (string), `creatorName` (string; alias `creator`), `limit` and
    ///   `offset` (integers ≥ 0).
    /// - Returns: A JSON array of the records' contents.
    /// - Throws: `.invalidArgument` for a malformed filter or an unknown key, plus the common errors.
    public func listAnnotations(filterJSON: String?) throws(LayerSyncError) -> String {
        try requireDownloaded()
        var filter = LayerStore.RecordFilter()
        if let filterJSON {
            guard case .object(let object) = try JSONValue.parse(filterJSON) else {
                throw LayerSyncError(.invalidArgument, "the filter must be a JSON object")
            }
            func integer(_ value: JSONValue, _ key: String, minimum: Int64) throws(LayerSyncError) -> Int64 {
                guard let number = value.int64Value, number >= minimum else {
                    throw LayerSyncError(.invalidArgument, "filter \(key) must be an integer ≥ \(minimum)")
                }
                return number
            }
            func string(_ value: JSONValue, _ key: String) throws(LayerSyncError) -> String {
                guard let text = value.stringValue else { throw LayerSyncError(.invalidArgument, "filter \(key) must be a string") }
                return text
            }
            for member in object.members where !member.value.isNull {
                switch member.key {
                case "pageIndex", "page": filter.pageIndex = try integer(member.value, member.key, minimum: 0)
                case "type": filter.type = try string(member.value, member.key)
                case "creatorName", "creator": filter.creatorName = try string(member.value, member.key)
                case "limit": filter.limit = try integer(member.value, member.key, minimum: 0)
                case "offset": filter.offset = try integer(member.value, member.key, minimum: 0)
                default: throw LayerSyncError(.invalidArgument, "unknown filter key \"\(member.key)\"")
                }
            }
        }
        return "[" + (try store.listRecords(filter: filter)).joined(separator: ",") + "]"
    }

    // MARK: Helpers

    /// Parses a record: a JSON object with a non-empty string `type`.
    static func recordObject(_ json: String) throws(LayerSyncError) -> JSONObject {
        let value = try JSONValue.parse(json)
        guard case .object(let object) = value else {
            throw LayerSyncError(.invalidJSONStructure, "a record must be a JSON object")
        }
        try RecordLimits.check(value)
        guard let type = object["type"]?.stringValue, !type.isEmpty else {
            throw LayerSyncError(.invalidJSONStructure, "a record needs a string \"type\"")
        }
        // Instant JSON: customData is a JSON object (or null) the app owns.
        if let customData = object["customData"] {
            switch customData {
            case .object, .null: break
            default: throw LayerSyncError(.invalidCustomData, "\"customData\" must be a JSON object or null")
            }
        }
        try RecordSchema.check(object)
        return object
    }

    /// Validates a record id value: a string of 1–128 characters without control characters.
    static func recordID(_ value: JSONValue) throws(LayerSyncError) -> String {
        guard let id = value.stringValue, RecordLimits.isValidID(id) else {
            throw LayerSyncError(.invalidJSONStructure, "\"id\" must be a string of 1 to 128 characters without control characters")
        }
        return id
    }

    /// After a local write: report the state change and arm the debounce timer.
    func didEditLocally() {
        publishState()
        scheduleAutoSync()
    }
}
