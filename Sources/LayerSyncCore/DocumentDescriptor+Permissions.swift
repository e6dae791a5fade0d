import LayerSyncModel
import LayerSyncStore
import LayerSyncTransport

/// Collaboration permissions on the client (docs/protocol.md "Collaboration permissions"):
/// records handed out with their ownership and what this user may do with them, forbidden
/// local changes refused at the API, the default group, and a reauthentication with other
/// grants. The decisions are ``PermissionGrant``'s (LayerSyncModel); the server stays the
/// authority and rejects what slips through (a race) with reason `forbidden`.
///
/// Every record handed out carries, next to its Instant JSON (names as in Nutrient's Web SDK
/// and Document Engine's records), its ownership: `createdBy`, `updatedBy`, `group` (strings,
/// or null when there is none: a record imported from a PDF or XFDF on the server, which no
/// user created, has `"createdBy": null`; the server's record shape writes it the same way).
/// Under a JWT with a `collaboration_permissions` claim it also carries what this user may do
/// with it (Nutrient's rule: the flags are present only with collaboration permissions): the
/// booleans `isEditable` (update its content: `edit`, `fill` for a form field value),
/// `isDeletable` (`delete`, for a root with replies on every live reply too), `canReply`
/// (create a comment whose `rootId` is this record: `write` and `reply`), `isFillable` (form
/// fields: `fill`; a value and a widget as their form field allows, the field named by the
/// value's `name` / the widget's `formFieldName`, else by their own ownership; false for other
/// records) and `canSetGroup` (`set-group`). On input, with or
/// without a claim, `group` is the record's group (a create: its group, default the current
/// default group; an update: a new value is a group change) and the other keys are ignored (a
/// record handed out can be passed back as it is); they never become part of the content.
extension DocumentDescriptor {
    /// The ownership keys every record handed out carries besides its content (`group` is
    /// also input: the record's group).
    static let ownershipKeys = ["createdBy", "updatedBy", "group"]
    /// The permission flags a record handed out carries under a `collaboration_permissions` claim.
    static let permissionFlagKeys = ["isEditable", "isDeletable", "canReply", "isFillable", "canSetGroup"]

    /// What the token in use may do.
    var grant: PermissionGrant { mutableState.withLock { $0.authentication.claims.grant } }

    /// The group new records get (Instant's `defaultGroup`): the host's override
    /// (``setDefaultGroup(_:)``), else the JWT's `default_group`, else `nil` (none).
    /// - Throws: `.invalidState` after storage removal, `.databaseAccessFailed`.
    public func defaultGroup() throws(LayerSyncError) -> String? {
        try store.defaultGroupOverride() ?? mutableState.withLock { $0.authentication.claims.defaultGroup }
    }

    /// Overrides the group of the records created from now on (Instant's
    /// `overrideDefaultGroup`), or with `nil` goes back to the JWT's `default_group`
    /// (`resetDefaultGroup`). Kept in the layer's local store (it survives a restart and a
    /// reauthentication). A group other than the JWT's `default_group` needs `set-group` for it
    /// when a record is created under a `collaboration_permissions` claim (checked per create).
    /// - Parameter group: The group, or `nil` to reset.
    /// - Throws: `.invalidArgument` for an empty group or one with control characters,
    ///   `.invalidState` after storage removal, `.databaseAccessFailed`.
    public func setDefaultGroup(_ group: String?) throws(LayerSyncError) {
        if let group, group.isEmpty || group.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw LayerSyncError(.invalidArgument, "a group is a non-empty string without control characters", documentID: documentID)
        }
        do {
            try store.setDefaultGroupOverride(group)
        } catch {
            throw error.with(documentID: documentID)
        }
    }

    /// A forbidden local change, refused before anything is stored or queued.
    func forbidden(_ why: String, recordID: String?) -> LayerSyncError {
        LayerSyncError(.forbidden, "collaboration permissions: \(why)", documentID: documentID, recordID: recordID)
    }

    /// The record as handed out: its content plus ownership and, under a claim, flags (see the
    /// type's doc), or `nil` when the token may not view it.
    func handOut(_ record: StoredRecord, _ grant: PermissionGrant) throws(LayerSyncError) -> String? {
        try handOut([record], grant).first
    }

    /// ``handOut(_:_:)`` of each record the token may view, as a JSON array.
    func handOut(_ records: [StoredRecord]) throws(LayerSyncError) -> String {
        "[" + (try handOut(records, grant)).joined(separator: ",") + "]"
    }

    /// The records the token may view, in order, as handed out. Under a claim `isDeletable`
    /// needs the replies of the records that may be deleted themselves: they are read in one
    /// query for all of them (not one per record), and judged by
    /// ``PermissionGrant/forbiddenDelete(current:replies:)``, the rule a delete is refused by.
    func handOut(_ records: [StoredRecord], _ grant: PermissionGrant) throws(LayerSyncError) -> [String] {
        guard grant.isRestricted else { return records.map { Self.handedOut($0, extras: []) } }
        let visible = records.filter { grant.allows(.view, $0.ownership) }
        let replies = try store.replies(rootIDs: visible.filter { grant.allows(.delete, $0.ownership) }.map(\.id))
        let fieldNames = visible.map(Self.fieldName)
        let fields = try store.formFields(names: Array(Set(fieldNames.compactMap { $0 })))
        return zip(visible, fieldNames).map { record, fieldName in
            let ownership = record.ownership
            let contentType = CollaborationPermissions.ContentType(recordType: record.type)
            // A value and a widget are filled as their form field allows (a value's rule: the
            // field's ownership, or the record's own when the field is not known).
            let fillable = contentType == .formFields && grant.allows(.view, ownership)
                && grant.mayFill(field: fieldName.flatMap { fields[$0]?.ownership }, createdBy: ownership.createdBy,
                                 group: ownership.group)
            let isValue = record.type == CollaborationPermissions.formFieldValueType
            let deletable = grant.forbiddenDelete(current: ownership,
                                                  replies: (replies[record.id] ?? []).map { ($0.id, $0.ownership) }) == nil
            let canReply = grant.forbiddenCreate(type: CollaborationPermissions.commentType, group: nil, groupGiven: false,
                                                 root: ownership) == nil
            return Self.handedOut(record, extras: [
                ("isEditable", .bool(isValue ? fillable : grant.allows(.edit, ownership))),
                ("isDeletable", .bool(deletable)),
                ("canReply", .bool(canReply)),
                ("isFillable", .bool(fillable)),
                ("canSetGroup", .bool(grant.allows(.setGroup, ownership))),
            ])
        }
    }

    /// The form field a record is filled through: a value's `name`, a widget's
    /// `formFieldName` (`nil` for other records, or without a string one).
    private static func fieldName(_ record: StoredRecord) -> String? {
        let key: String
        switch record.type {
        case CollaborationPermissions.formFieldValueType?: key = "name"
        case "pspdfkit/widget"?: key = "formFieldName"
        default: return nil
        }
        return (try? JSONValue.parse(record.content))?[key]?.stringValue
    }

    /// A record's content with its ownership keys and then `extras` added.
    private static func handedOut(_ record: StoredRecord, extras: [(String, JSONValue)]) -> String {
        let members: [(String, JSONValue)] = [
            ("createdBy", record.createdBy.map(JSONValue.string) ?? .null),
            ("updatedBy", record.updatedBy.map(JSONValue.string) ?? .null),
            ("group", record.group.map(JSONValue.string) ?? .null),
        ] + extras
        // The content is compact JSON from the store: splice the keys in before its closing
        // brace, unless it holds one of them already (content written elsewhere): then replace.
        let content = record.content
        if content.hasSuffix("}"), !mentionsKey(content, members.map(\.0)) {
            let spliced = members.map { JSONValue.string($0.0).jsonText + ":" + $0.1.jsonText }.joined(separator: ",")
            return String(content.dropLast()) + (content == "{}" ? "" : ",") + spliced + "}"
        }
        guard case .object(var object)? = try? JSONValue.parse(content) else { return content }
        for (key, value) in members { object[key] = value }
        return JSONValue.object(object).jsonText
    }

    /// Whether `content` holds `"key"` for one of `keys`, compared as UTF-8 bytes (Character-wise
    /// `String.contains` cost more than the rest of a create once per key). Whatever the
    /// Character-wise search finds this finds too; a find beyond it only takes the record
    /// through ``handedOut(_:extras:)``'s parsing path, which is right for any content.
    private static func mentionsKey(_ content: String, _ keys: [String]) -> Bool {
        let patterns = keys.map { Array("\"\($0)\"".utf8) }
        func search(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
            for start in bytes.indices where bytes[start] == UInt8(ascii: "\"") {
                for pattern in patterns where bytes.count - start >= pattern.count {
                    if pattern.indices.allSatisfy({ bytes[start + $0] == pattern[$0] }) { return true }
                }
            }
            return false
        }
        return content.utf8.withContiguousStorageIfAvailable(search) ?? Array(content.utf8).withUnsafeBufferPointer(search)
    }

    /// The `group` a record given by the host asks for, removed from it with the other keys
    /// of a record handed out (``ownershipKeys``, ``permissionFlagKeys``), with or without a
    /// claim: `.none` when it names none, `.some(nil)` for `"group": null`.
    /// - Throws: `.invalidJSONStructure` for a `group` that is neither a string nor null.
    static func takeOwnershipKeys(_ object: inout JSONObject) throws(LayerSyncError) -> String?? {
        for key in ownershipKeys + permissionFlagKeys where key != "group" { object[key] = nil }
        guard let value = object["group"] else { return .none }
        object["group"] = nil
        if value.isNull { return .some(nil) }
        guard let group = value.stringValue else {
            throw LayerSyncError(.invalidJSONStructure, "\"group\" must be a string or null")
        }
        return .some(group)
    }

    /// The claims of `token`: those parsed when it was set (a JWT is parsed once; a large
    /// claim is not parsed again per sync), else parsed now; `nil` for a malformed one.
    func claims(of token: String) -> JWTClaims? {
        let current = mutableState.withLock { $0.authentication.claims }
        return current.token == token ? current : try? JWTClaims(token: token)
    }

    /// A live record the token may view, else `.noSuchAnnotation` (a record outside the view
    /// is not handed out, so it does not exist for the host).
    func visibleRecord(_ id: String) throws(LayerSyncError) -> StoredRecord {
        guard let record = try store.storedRecord(id: id), grant.allows(.view, record.ownership) else {
            throw LayerSyncError(.noSuchAnnotation, "no annotation with id \(id)", documentID: documentID, recordID: id)
        }
        return record
    }

    // MARK: Reauthentication with other grants

    /// When the local records were filtered by the server for other collaboration permissions
    /// (or another user) than the token in use has (a reauthentication, a store opened with
    /// another token), asks the server once for what that changes (`records?since=` with
    /// `previous_permissions`, protocol.md "Reauthentication with other grants") and applies
    /// it: records the new token may view appear, those it may not disappear, both reported
    /// through `didReceiveChanges` (created/deleted); queued local changes of a record that
    /// disappears are reported through `didRejectChanges` with reason `forbidden`. The rest of
    /// the delta (`has_more`) is left to the sync that follows (the cursor moved with what was
    /// applied). Runs on the work queue (serialised with sync cycles and long-poll answers).
    /// - Throws: The request's errors (nothing applied; tried again at the next sync cycle).
    func reconcileGrant(token: String, cancellation: TransferCancellation) throws(LayerSyncError) {
        guard try store.isDownloaded(), let claims = claims(of: token) else { return }
        let applied = try store.appliedGrant() ?? (permissions: nil, userID: claims.userID)
        let current = (permissions: claims.collaboration?.entries, userID: claims.userID)
        // Code points, as the server compares (not Swift's canonical equivalence).
        guard !CollaborationPermissions.sameEntries(applied.permissions, current.permissions)
                || !applied.userID.isExactly(current.userID) else { return }
        let since = try store.since()
        let page = try context.server.regrantedRecords(documentID: documentID, layer: layerName, since: since, epoch: try store.epoch(),
                                                       previousPermissions: applied.permissions, previousUserID: applied.userID,
                                                       jwt: token, session: workSession, cancellation: cancellation)
        guard page.epoch == (try store.epoch()) else { return }  // a new epoch: the sync cycle re-downloads
        report(try store.applyRegranted(page, since: page.hasMore ? page.nextSince : page.revision,
                                        permissions: current.permissions, userID: current.userID))
    }
}
