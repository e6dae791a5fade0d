import LayerSyncModel
import LayerSyncStore
import LayerSyncTransport

/// Collaboration permissions on the client (docs/protocol.md "Collaboration permissions"):
/// records handed out with their ownership and what this user may do with them, forbidden
/// local changes refused at the API, the default group, and a reauthentication with other
/// grants. The decisions are ``PermissionGrant``'s (LayerSyncModel); the server stays the
/// authority and rejects what slips through (a race) with reason `forbidden`.
///
/// Under a JWT with a `collaboration_permissions` claim, a record handed out carries, next to
/// its Instant JSON (names as in Nutrient's Web SDK and Document Engine's records): `createdBy`, `updatedBy`, `group` (strings or null), and the
/// booleans `isEditable` (update its content: `edit`, `fill` for a form field value),
/// `isDeletable` (`delete`, for a root with replies on every live reply too), `canReply`
/// (create a comment whose `rootId` is this record: `write` and `reply`), `isFillable` (form
/// fields: `fill`; false for other records) and `canSetGroup` (`set-group`). On input,
/// `group` is the record's group (a create: its group, default the current default group; an
/// update: a new value is a group change) and the other keys are ignored (a record handed out
/// can be passed back as it is). Without the claim a record is handed out as stored and taken
/// as given, as before permissions existed (the rule: without the claim, today's
/// behaviour stays), so hosts and tests comparing records with the server's content keep
/// working; the ownership is stored all the same, and creates get the default group.
extension DocumentDescriptor {
    /// The keys a record handed out carries besides its content, output only.
    static let handOutOnlyKeys = ["createdBy", "updatedBy", "isEditable", "isDeletable", "canReply", "isFillable", "canSetGroup"]

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

    /// The record as handed out: its content plus ownership and flags (see the type's doc),
    /// or `nil` when the token may not view it.
    func handOut(_ record: StoredRecord, _ grant: PermissionGrant) throws(LayerSyncError) -> String? {
        guard grant.isRestricted else { return record.content }
        let ownership = record.ownership
        guard grant.allows(.view, ownership) else { return nil }
        let contentType = CollaborationPermissions.ContentType(recordType: record.type)
        let editAction: CollaborationPermissions.Action = record.type == CollaborationPermissions.formFieldValueType ? .fill : .edit
        var deletable = grant.allows(.delete, ownership)
        if deletable, grant.isRestricted {
            deletable = try store.replies(rootID: record.id).allSatisfy { grant.allows(.delete, $0.ownership) }
        }
        let canReply = grant.forbiddenCreate(type: CollaborationPermissions.commentType, group: nil, groupGiven: false,
                                             root: ownership) == nil
        let extras: [(String, JSONValue)] = [
            ("createdBy", record.createdBy.map(JSONValue.string) ?? .null),
            ("updatedBy", record.updatedBy.map(JSONValue.string) ?? .null),
            ("group", record.group.map(JSONValue.string) ?? .null),
            ("isEditable", .bool(grant.allows(editAction, ownership))),
            ("isDeletable", .bool(deletable)),
            ("canReply", .bool(canReply)),
            ("isFillable", .bool(contentType == .formFields && grant.allows(.fill, ownership))),
            ("canSetGroup", .bool(grant.allows(.setGroup, ownership))),
        ]
        // The content is compact JSON from the store: splice the keys in before its closing
        // brace, unless it holds one of them already (content written elsewhere): then replace.
        let content = record.content
        if content.hasSuffix("}"), !extras.contains(where: { content.contains("\"\($0.0)\"") }) {
            let members = extras.map { JSONValue.string($0.0).jsonText + ":" + $0.1.jsonText }.joined(separator: ",")
            return String(content.dropLast()) + (content == "{}" ? "" : ",") + members + "}"
        }
        guard case .object(var object)? = try? JSONValue.parse(content) else { return content }
        for (key, value) in extras { object[key] = value }
        return JSONValue.object(object).jsonText
    }

    /// ``handOut(_:_:)`` of each record the token may view, as a JSON array.
    func handOut(_ records: [StoredRecord]) throws(LayerSyncError) -> String {
        let grant = grant
        var texts: [String] = []
        texts.reserveCapacity(records.count)
        for record in records {
            if let text = try handOut(record, grant) { texts.append(text) }
        }
        return "[" + texts.joined(separator: ",") + "]"
    }

    /// The `group` a record given by the host asks for, removed from it with the hand-out-only
    /// keys: `.none` when it names none, `.some(nil)` for `"group": null`.
    /// - Throws: `.invalidJSONStructure` for a `group` that is neither a string nor null.
    /// Without a claim (`restricted` false) nothing is taken: the record is stored as given.
    static func takeOwnershipKeys(_ object: inout JSONObject, restricted: Bool) throws(LayerSyncError) -> String?? {
        guard restricted else { return .none }
        for key in handOutOnlyKeys { object[key] = nil }
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
        guard applied.permissions != current.permissions || applied.userID != current.userID else { return }
        let since = try store.since()
        let page = try context.server.regrantedRecords(documentID: documentID, layer: layerName, since: since, epoch: try store.epoch(),
                                                       previousPermissions: applied.permissions, previousUserID: applied.userID,
                                                       jwt: token, session: workSession, cancellation: cancellation)
        guard page.epoch == (try store.epoch()) else { return }  // a new epoch: the sync cycle re-downloads
        report(try store.applyRegranted(page, since: page.hasMore ? page.nextSince : page.revision,
                                        permissions: current.permissions, userID: current.userID))
    }
}
