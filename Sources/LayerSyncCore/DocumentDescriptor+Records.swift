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
    ///   `group` (string or null) is the new record's group, default ``defaultGroup()``, and
    ///   the other keys of a record handed out (`createdBy`, `updatedBy`, `isEditable`, ...)
    ///   are ignored, with or without a `collaboration_permissions` claim. Under a JWT
    ///   `creator_name` an annotation's or comment's `creatorName` is set to it (the server
    ///   forces it too).
    /// - Returns: The stored record as handed out (with `id`, `v` and its ownership; under a claim also the flags).
    /// - Throws: `.invalidArgument` (bad JSON text, or a record with that id exists),
    ///   `.invalidJSONStructure`, `.forbidden` (the collaboration permissions do not allow
    ///   creating it: no `write`, a comment (or any record with a `rootId`) without `reply` on the thread, a form field value
    ///   without `fill`, a group other than the JWT's `default_group` without `set-group` for
    ///   it), plus the common errors.
    public func createAnnotation(json: String) throws(LayerSyncError) -> String {
        try requireDownloaded()
        var object = try Self.recordObject(json)
        let claims = mutableState.withLock { $0.authentication.claims }
        let grant = claims.grant
        let groupAsked = try Self.takeOwnershipKeys(&object)
        let id: String
        if let given = object["id"] {
            id = try Self.recordID(given)
        } else {
            id = ULID.generate()
            object["id"] = .string(id)
        }
        if object["v"] == nil { object["v"] = .integer(2) }
        let type = object["type"]?.stringValue
        if let name = claims.creatorName, type != "pspdfkit/bookmark",
           CollaborationPermissions.ContentType(recordType: type) != .formFields {
            object["creatorName"] = .string(name)
        }
        // A form field value's form field: `fill` is judged by it, and the value inherits its group.
        let field = type == CollaborationPermissions.formFieldValueType
            ? try store.formField(name: object["name"]?.stringValue)?.ownership : nil
        let override = field == nil ? try store.defaultGroupOverride() : nil
        // Sent when the host named one or overrode the default; else the server applies the
        // JWT's (or, for a value, its field's).
        let sendGroup = groupAsked != nil || override != nil
        let group = groupAsked ?? override ?? grant.defaultGroup(ofType: type, field: field)
        // A record of any type with a rootId is a reply (docs/protocol.md).
        let rootID = object["rootId"]?.stringValue
        var root: RecordOwnership?
        if let rootID, grant.isRestricted {
            root = try store.storedRecord(id: rootID)?.ownership
        }
        if let why = grant.forbiddenCreate(type: type, group: group, groupGiven: sendGroup, root: root, rootGiven: rootID != nil,
                                           field: field) {
            throw forbidden(why, recordID: id)
        }
        let text = JSONValue.object(object).jsonText
        do {
            try store.createRecord(id: id, content: text, createdBy: claims.userID, group: group, sendGroup: sendGroup)
        } catch {
            throw error.with(documentID: documentID)
        }
        didEditLocally()
        return try handOut(StoredRecord(id: id, content: text, createdBy: claims.userID, updatedBy: claims.userID,
                                        group: group, type: type), grant) ?? text
    }

    /// Replaces a record's content (and with `group`, its group).
    /// - Parameter json: The full new Instant JSON object, with the record's `id` and a `type`;
    ///   `group` as in ``createAnnotation(json:)`` (absent: the group stays; another value: a
    ///   group change, which needs `set-group`).
    /// - Returns: The stored record as handed out.
    ///   Under a JWT `creator_name` an annotation's or comment's `creatorName` stays the stored one.
    /// - Throws: `.noSuchAnnotation` if no live record the token may view has the id,
    ///   `.forbidden` (no `edit` / `fill`, which every update needs, one that changes nothing
    ///   too, unless it is a pure group change; no `set-group` for the group change; no
    ///   `reply` on the thread an update that sets or changes `rootId` moves it into),
    ///   `.invalidArgument`, `.invalidJSONStructure`, plus the common errors.
    public func updateAnnotation(json: String) throws(LayerSyncError) -> String {
        try requireDownloaded()
        var object = try Self.recordObject(json)
        let claims = mutableState.withLock { $0.authentication.claims }
        let grant = claims.grant
        let groupAsked = try Self.takeOwnershipKeys(&object)
        guard let given = object["id"] else {
            throw LayerSyncError(.invalidJSONStructure, "an update needs the record's \"id\"", documentID: documentID)
        }
        let id = try Self.recordID(given)
        if object["v"] == nil { object["v"] = .integer(2) }
        let current = try visibleRecord(id)
        let storedContent = try? JSONValue.parse(current.content)
        // Under a JWT `creator_name` the name stays the stored one (the server keeps it too).
        let type = object["type"]?.stringValue
        if claims.creatorName != nil, type != "pspdfkit/bookmark",
           CollaborationPermissions.ContentType(recordType: type) != .formFields {
            object["creatorName"] = storedContent?["creatorName"]
        }
        let text = JSONValue.object(object).jsonText
        let newGroup = groupAsked.flatMap { $0.isExactly(current.group) ? nil : .some($0) }  // code points, as the server
        let contentChanged = storedContent != .object(object)
        // Setting or changing rootId moves the record into a thread: `reply` there too.
        let newRootID = object["rootId"]?.stringValue
        let movesThread = newRootID != nil && newRootID != storedContent?["rootId"]?.stringValue
        var root: RecordOwnership?
        if movesThread, let newRootID, grant.isRestricted {
            root = try store.storedRecord(id: newRootID)?.ownership
        }
        // A form field value is filled as its form field allows (the stored name's; a new name's too).
        var field: RecordOwnership?, newField: RecordOwnership?, renamed = false
        if current.type == CollaborationPermissions.formFieldValueType, grant.isRestricted {
            let name = storedContent?["name"]?.stringValue, newName = type == CollaborationPermissions.formFieldValueType ? object["name"]?.stringValue : nil
            renamed = name != newName
            let fields = try store.formFields(names: [name, newName].compactMap { $0 })
            field = name.flatMap { fields[$0]?.ownership }
            newField = newName.flatMap { fields[$0]?.ownership }
        }
        if let why = grant.forbiddenUpdate(current: current.ownership, contentChanged: contentChanged,
                                           newType: type, group: newGroup ?? nil,
                                           groupGiven: newGroup != nil, movesThread: movesThread, root: root,
                                           field: field, renamed: renamed, newField: newField) {
            throw forbidden(why, recordID: id)
        }
        do {
            try store.updateRecord(id: id, content: text, updatedBy: claims.userID, group: newGroup)
        } catch {
            throw error.with(documentID: documentID)
        }
        didEditLocally()
        let stored = StoredRecord(id: id, content: text, createdBy: current.createdBy, updatedBy: claims.userID ?? current.updatedBy,
                                  group: newGroup ?? current.group, type: type)
        return try handOut(stored, grant) ?? text
    }

    /// Deletes a record and the local comments whose `rootId` is its id.
    /// - Parameter id: The record id.
    /// - Throws: `.noSuchAnnotation`, `.forbidden` (no `delete` on the record or on one of
    ///   its live replies, which the delete takes with it), plus the common errors.
    public func deleteAnnotation(id: String) throws(LayerSyncError) {
        try requireDownloaded()
        let current = try visibleRecord(id)
        let grant = grant
        if grant.isRestricted {
            let replies = try store.replies(rootID: id).map { (id: $0.id, ownership: $0.ownership) }
            if let why = grant.forbiddenDelete(current: current.ownership, replies: replies) { throw forbidden(why, recordID: id) }
        }
        do {
            try store.deleteRecord(id: id)
        } catch {
            throw error.with(documentID: documentID)
        }
        didEditLocally()
    }

    /// A record as handed out (content, ownership; under a claim flags).
    /// - Parameter id: The record id.
    /// - Returns: The Instant JSON text.
    /// - Throws: `.noSuchAnnotation` (also for a record the token may not view), plus the common errors.
    public func annotation(id: String) throws(LayerSyncError) -> String {
        try requireDownloaded()
        let record = try visibleRecord(id)
        return try handOut(record, grant) ?? record.content
    }

    /// Live records the token may view, in creation order, as handed out.
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
        return try handOut(try store.listStoredRecords(filter: filter))
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
