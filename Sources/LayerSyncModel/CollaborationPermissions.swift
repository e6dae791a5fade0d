/// Collaboration permissions (Instant's content ownership): the JWT claim
/// `collaboration_permissions` parsed, and THE client-side decision of what a user may do
/// with a record (docs/protocol.md "Collaboration permissions").
///
/// The server is the authority (`server/layersync_server/permissions.py`); this type mirrors
/// its rules one for one so that the engine can refuse a change the server would reject
/// before queuing it, and can tell the host what it may do with each record. The cases in
/// `Tests/LayerSyncCoreTests/Resources/permission-cases.json` are checked against both.
///
/// Syntax: `<content-type>:<action>:<scope>`; content types `annotations` (every record that
/// is not one of the two others), `comments` (`pspdfkit/comment`), `form-fields`
/// (`pspdfkit/form-field/*`, `pspdfkit/widget`, `pspdfkit/form-field-value`); actions `view`,
/// `edit`, `delete`, `set-group`, `reply` (comments only), `fill` (form fields only), `*`;
/// scopes `all`, `self`, `group=<name>`, `createdBy=<user_id>`. Entries add up.
package struct CollaborationPermissions: Sendable, Equatable {
    /// A claim's content type.
    package enum ContentType: String, Sendable, CaseIterable {
        case annotations, comments, formFields = "form-fields"

        /// The actions an entry may name for this content type (`*` stands for all of them).
        var actions: [Action] {
            switch self {
            case .annotations: [.view, .edit, .delete, .setGroup]
            case .comments: [.view, .edit, .delete, .reply, .setGroup]
            case .formFields: [.view, .edit, .delete, .fill, .setGroup]
            }
        }

        /// The content type of a record whose `content.type` is `recordType` (`nil`: none, or
        /// not a string, which counts as `annotations` like any type the claim does not name).
        /// Compared by code points, as the server's `record_kind` does.
        package init(recordType: String?) {
            guard let recordType else { self = .annotations; return }
            if recordType.isExactly(CollaborationPermissions.commentType) {
                self = .comments
            } else if recordType.utf8.starts(with: "pspdfkit/form-field/".utf8) || recordType.isExactly("pspdfkit/widget")
                        || recordType.isExactly(CollaborationPermissions.formFieldValueType) {
                self = .formFields
            } else {
                self = .annotations
            }
        }
    }

    /// A claim's action.
    package enum Action: String, Sendable, CaseIterable {
        case view, edit, delete, reply, fill, setGroup = "set-group"
    }

    /// Who one grant covers (names compared by code points: ``ExactString``).
    struct Scope: Sendable, Equatable {
        var all = false
        var own = false
        var groups: Set<ExactString> = []
        var creators: Set<ExactString> = []

        /// Adds what `other` covers.
        mutating func merge(_ other: Scope) {
            all = all || other.all
            own = own || other.own
            groups.formUnion(other.groups)
            creators.formUnion(other.creators)
        }

        func covers(createdBy: String?, group: String?, userID: String?) -> Bool {
            if all { return true }
            if own, let userID, let createdBy, createdBy.isExactly(userID) { return true }
            if let group, groups.contains(ExactString(group)) { return true }
            if let createdBy, creators.contains(ExactString(createdBy)) { return true }
            return false
        }
    }

    /// `pspdfkit/comment`.
    package static let commentType = "pspdfkit/comment"
    /// `pspdfkit/form-field-value`.
    package static let formFieldValueType = "pspdfkit/form-field-value"

    /// The entries as given (what a reauthentication sends back as `previous_permissions`).
    package let entries: [String]
    private var scopes: [String: Scope] = [:]

    private static func key(_ contentType: ContentType, _ action: Action) -> String {
        contentType.rawValue + ":" + action.rawValue
    }

    /// Parses the claim's entries.
    /// - Parameter entries: The array's strings.
    /// - Throws: `.invalidJWT` naming the first malformed entry: not three `:`-separated parts,
    ///   an unknown content type, an action that content type does not have (`reply` only for
    ///   comments, `fill` only for form fields) and not `*`, a scope other than `all`, `self`,
    ///   `group=<name>`, `createdBy=<user_id>` (a name not empty). The same rules and words as
    ///   the server's `parse_claim`.
    package init(entries: [String]) throws(LayerSyncError) {
        self.entries = entries
        for entry in entries {
            func invalid(_ why: String) -> LayerSyncError {
                LayerSyncError(.invalidJWT, "malformed JWT: collaboration_permissions entry \"\(entry)\": \(why)")
            }
            // Python's split(":", 2): the scope keeps any further colons. On code points, as
            // the server: a `:` or `=` followed by a combining mark is one Character in Swift.
            let parts = entry.unicodeScalars.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
                .map { String(Substring($0)) }
            guard parts.count == 3 else { throw invalid("expected <content-type>:<action>:<scope>") }
            guard let contentType = ContentType.allCases.first(where: { $0.rawValue.isExactly(parts[0]) }) else {
                throw invalid("content type must be one of annotations, comments, form-fields")
            }
            let actions: [Action]
            if parts[1].isExactly("*") {
                actions = contentType.actions
            } else if let action = Action.allCases.first(where: { $0.rawValue.isExactly(parts[1]) }),
                      contentType.actions.contains(action) {
                actions = [action]
            } else {
                let names = contentType.actions.map(\.rawValue).joined(separator: ", ")
                throw invalid("action must be one of \(names) or * for \(contentType.rawValue)")
            }
            var grant = Scope()
            let scopeText = parts[2].unicodeScalars
            if parts[2].isExactly("all") {
                grant.all = true
            } else if parts[2].isExactly("self") {
                grant.own = true
            } else if let equals = scopeText.firstIndex(of: "="), scopeText.index(after: equals) != scopeText.endIndex,
                      case let name = String(Substring(scopeText[..<equals])), name.isExactly("group") || name.isExactly("createdBy") {
                let value = ExactString(String(Substring(scopeText[scopeText.index(after: equals)...])))
                if name.isExactly("group") { grant.groups.insert(value) } else { grant.creators.insert(value) }
            } else {
                throw invalid("scope must be all, self, group=<name> or createdBy=<user_id>")
            }
            // Mutated in place: a copy out and back would copy the sets for every entry,
            // quadratic in a claim of many `group=` entries.
            for action in actions {
                scopes[Self.key(contentType, action), default: Scope()].merge(grant)
            }
        }
    }

    /// Parses the claim's value as it is in the JWT payload.
    /// - Parameter value: The claim (`nil` or JSON `null`: absent).
    /// - Returns: The permissions, `nil` when the claim is absent (full access).
    /// - Throws: `.invalidJWT` for a value that is not an array of strings or a malformed entry.
    package static func parse(claim value: JSONValue?) throws(LayerSyncError) -> CollaborationPermissions? {
        guard let value, !value.isNull else { return nil }
        guard let array = value.arrayValue else {
            throw LayerSyncError(.invalidJWT, "malformed JWT: claim collaboration_permissions must be an array of strings")
        }
        var entries: [String] = []
        for element in array {
            guard let string = element.stringValue else {
                throw LayerSyncError(.invalidJWT, "malformed JWT: claim collaboration_permissions must be an array of strings")
            }
            entries.append(string)
        }
        return try CollaborationPermissions(entries: entries)
    }

    func scope(_ contentType: ContentType, _ action: Action) -> Scope {
        scopes[Self.key(contentType, action)] ?? Scope()
    }

    package static func == (lhs: Self, rhs: Self) -> Bool { sameEntries(lhs.entries, rhs.entries) }

    /// Whether two claims' entries are the same strings, code point for code point (`nil`: no claim).
    package static func sameEntries(_ lhs: [String]?, _ rhs: [String]?) -> Bool {
        guard let lhs, let rhs else { return lhs == nil && rhs == nil }
        return lhs.count == rhs.count && zip(lhs, rhs).allSatisfy { $0.isExactly($1) }
    }
}

/// A record's ownership as the permissions see it: its `content.type`, `createdBy`, `group`.
package struct RecordOwnership: Sendable, Equatable {
    /// `content.type` (`nil` when missing or not a string).
    package var type: String?
    /// The JWT `user_id` that created it (`nil`: nobody, e.g. imported from the PDF).
    package var createdBy: String?
    /// Its group (`nil`: none).
    package var group: String?

    /// - Parameters:
    ///   - type: `content.type`.
    ///   - createdBy: `createdBy`.
    ///   - group: `group`.
    package init(type: String?, createdBy: String?, group: String?) {
        self.type = type
        self.createdBy = createdBy
        self.group = group
    }

    /// Code point equality (the server's), not Swift's canonical equivalence.
    package static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.type.isExactly(rhs.type) && lhs.createdBy.isExactly(rhs.createdBy) && lhs.group.isExactly(rhs.group)
    }
}

/// What one user (a token's `collaboration_permissions`, `user_id`, `permissions`,
/// `default_group`) may do: the one decision function of the client (mirrors `allows` and
/// `forbidden_change` of the server's permissions.py).
package struct PermissionGrant: Sendable, Equatable {
    /// The parsed claim, `nil` = no claim = full access to the layer.
    package var collaboration: CollaborationPermissions?
    /// The token's `user_id`.
    package var userID: String?
    /// Whether the token has the plain `write` permission (creating needs it under a claim).
    package var canWrite: Bool
    /// The token's `default_group` claim (the group the server gives a create without `group`).
    package var defaultGroup: String?

    /// - Parameters:
    ///   - collaboration: The claim, `nil` for none.
    ///   - userID: `user_id`.
    ///   - canWrite: `write` in `permissions` (or no `permissions` claim).
    ///   - defaultGroup: `default_group`.
    package init(collaboration: CollaborationPermissions?, userID: String?, canWrite: Bool, defaultGroup: String?) {
        self.collaboration = collaboration
        self.userID = userID
        self.canWrite = canWrite
        self.defaultGroup = defaultGroup
    }

    /// Code point equality of the names (the server's), not Swift's canonical equivalence.
    package static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.collaboration == rhs.collaboration && lhs.userID.isExactly(rhs.userID) && lhs.canWrite == rhs.canWrite
            && lhs.defaultGroup.isExactly(rhs.defaultGroup)
    }

    /// Whether the token has a claim at all (without one, everything is allowed).
    package var isRestricted: Bool { collaboration != nil }

    /// May the user do `action` to a record owned as `record`? Every action other than `view`
    /// also needs `view` (nobody edits what they cannot see). No claim: always.
    package func allows(_ action: CollaborationPermissions.Action, _ record: RecordOwnership) -> Bool {
        guard let collaboration else { return true }
        let contentType = CollaborationPermissions.ContentType(recordType: record.type)
        guard collaboration.scope(contentType, .view).covers(createdBy: record.createdBy, group: record.group, userID: userID) else {
            return false
        }
        return action == .view
            || collaboration.scope(contentType, action).covers(createdBy: record.createdBy, group: record.group, userID: userID)
    }

    /// Why the user may not create a record, or `nil` (they may).
    /// - Parameters:
    ///   - type: The new record's `content.type`.
    ///   - group: The group the create asks for; `nil` for none given (the server then uses
    ///     `default_group`).
    ///   - groupGiven: Whether the create names a group (`group` may then be `nil`: no group).
    ///   - root: For a reply (a comment, or `rootGiven`), the thread's root record (`nil`: absent
    ///     or deleted).
    ///   - rootGiven: Whether the record has a string `rootId`: a record of any type with one is
    ///     a reply, which needs `reply` on the thread as a comment does.
    /// - Returns: The missing permission in words (the server's words), or `nil`.
    ///   - field: For a form field value, the live form field its `name` names (`nil`: none):
    ///     `fill` is judged by the field's ownership, and the value's group defaults to the field's.
    package func forbiddenCreate(type: String?, group: String?, groupGiven: Bool, root: RecordOwnership?,
                                 rootGiven: Bool = false, field: RecordOwnership? = nil) -> String? {
        guard collaboration != nil else { return nil }
        if !canWrite { return "token lacks the 'write' permission, which creating a record needs" }
        let inherited = defaultGroup(ofType: type, field: field)
        let groupOfNew = groupGiven ? group : inherited
        if type.isExactly(CollaborationPermissions.commentType) || rootGiven, !mayReply(root: root) {
            return "may not reply to this thread"
        }
        if type.isExactly(CollaborationPermissions.formFieldValueType),
           !(mayFill(field: field, createdBy: userID, group: groupOfNew)
             && allows(.view, RecordOwnership(type: type, createdBy: userID, group: groupOfNew))) {
            return "may not fill this form field"
        }
        if groupGiven, !group.isExactly(inherited), !allows(.setGroup, RecordOwnership(type: type, createdBy: userID, group: group)) {
            return "may not create a record in \(Self.groupWords(group))"
        }
        return nil
    }

    /// The group a create without `group` gets (the server's `default_group_of`): a form field
    /// value's is its form field's (`field`; Instant: values inherit the field's group), anything
    /// else's (and a value whose field is not known) the token's `default_group`.
    package func defaultGroup(ofType type: String?, field: RecordOwnership?) -> String? {
        if let field, type.isExactly(CollaborationPermissions.formFieldValueType) { return field.group }
        return defaultGroup
    }

    /// `fill` of a form field value (the server's `_may_fill`): judged by its form field's
    /// ownership (`field`; Instant scopes `fill` by the field's group and creator), or, when no
    /// such field is known, by the value's own (`createdBy`, `group`). Through a field it is an
    /// action on the field, so ``allows(_:_:)`` also needs `view` of the field: a field the token
    /// may not view fills no value (the server never sends one; only a local create can put one in the store).
    package func mayFill(field: RecordOwnership?, createdBy: String?, group: String?) -> Bool {
        if let field { return allows(.fill, field) }
        return allows(.fill, RecordOwnership(type: CollaborationPermissions.formFieldValueType, createdBy: createdBy, group: group))
    }

    /// Whether the user may add a reply to the thread of `root` (`nil`: no such live record):
    /// view of the root and `reply` matched against the root's ownership.
    package func mayReply(root: RecordOwnership?) -> Bool {
        guard let root else { return false }
        return allows(.view, root)
            && allows(.reply, RecordOwnership(type: CollaborationPermissions.commentType, createdBy: root.createdBy, group: root.group))
    }

    /// Why the user may not update a record, or `nil`.
    /// - Parameters:
    ///   - current: The record as it is.
    ///   - contentChanged: Whether the content changes (else a pure group change).
    ///   - newType: The new content's `type`.
    ///   - group: The group asked for, when `groupGiven`.
    ///   - groupGiven: Whether the update names a group.
    ///   - movesThread: Whether the update sets or changes `rootId` (it then needs `reply` on the
    ///     new thread, as creating a reply there does).
    ///   - root: When `movesThread`, the new thread's root record (`nil`: absent or deleted).
    ///   - field: For a form field value, the live form field its stored `name` names (`nil`:
    ///     none): `fill` is judged by it.
    ///   - renamed: Whether the update changes a value's `name` (`fill` of `newField` too).
    ///   - newField: When `renamed`, the form field of the new name (`nil`: none).
    /// - Returns: The missing permission in words, or `nil`. Every update needs `edit` (`fill`
    ///   for a form field value), one that changes nothing too, unless it is a pure group change.
    package func forbiddenUpdate(current: RecordOwnership, contentChanged: Bool, newType: String?, group: String?,
                                 groupGiven: Bool, movesThread: Bool = false, root: RecordOwnership? = nil,
                                 field: RecordOwnership? = nil, renamed: Bool = false, newField: RecordOwnership? = nil) -> String? {
        guard collaboration != nil else { return nil }
        if !allows(.view, current) { return "may not view this record" }
        let groupChange = groupGiven && !group.isExactly(current.group)
        if contentChanged || !groupChange {
            if current.type.isExactly(CollaborationPermissions.formFieldValueType) {
                if !(mayFill(field: field, createdBy: current.createdBy, group: current.group)
                     && (!(contentChanged && renamed) || mayFill(field: newField, createdBy: current.createdBy, group: current.group))) {
                    return "may not fill this record"
                }
            } else if !allows(.edit, current) {
                return "may not edit this record"
            }
        }
        if contentChanged {
            if CollaborationPermissions.ContentType(recordType: newType) != CollaborationPermissions.ContentType(recordType: current.type),
               !allows(.edit, RecordOwnership(type: newType, createdBy: current.createdBy, group: current.group)) {
                return "may not edit a record of that type"
            }
            if movesThread, !mayReply(root: root) { return "may not reply to this thread" }
        }
        if groupGiven, !group.isExactly(current.group),
           !(allows(.setGroup, current)
             && allows(.setGroup, RecordOwnership(type: newType, createdBy: current.createdBy, group: group))) {
            return "may not move this record to \(Self.groupWords(group))"
        }
        return nil
    }

    /// Why the user may not delete a record (and the live replies it takes with it), or `nil`.
    /// - Parameters:
    ///   - current: The record.
    ///   - replies: Its live replies (id and ownership), which the delete takes with it.
    /// - Returns: The missing permission in words, or `nil`.
    package func forbiddenDelete(current: RecordOwnership, replies: [(id: String, ownership: RecordOwnership)]) -> String? {
        guard collaboration != nil else { return nil }
        if !allows(.view, current) { return "may not view this record" }
        if !allows(.delete, current) { return "may not delete this record" }
        for reply in replies where !allows(.delete, reply.ownership) {
            // The id of a reply the user may not view is not theirs to know.
            if !allows(.view, reply.ownership) { return "may not delete a reply of this thread that you may not view" }
            return "may not delete reply \(reply.id) of this thread"
        }
        return nil
    }

    /// A group as the messages name it: `group 'name'`, or `no group` for none (the server's
    /// `permissions.group_words`, whose words the parity cases compare).
    private static func groupWords(_ group: String?) -> String { group.map { "group '\($0)'" } ?? "no group" }
}

/// A string whose equality and hash are its code points (the server's Python `str`), not
/// Swift's canonical equivalence, under which `"caf\u{E9}"` and `"cafe\u{301}"` are equal:
/// group names and user ids are matched as the server matches them.
struct ExactString: Hashable, Sendable {
    let text: String

    init(_ text: String) { self.text = text }

    static func == (lhs: Self, rhs: Self) -> Bool { lhs.text.isExactly(rhs.text) }

    func hash(into hasher: inout Hasher) {
        for byte in text.utf8 { hasher.combine(byte) }
    }
}

extension String {
    /// Whether the two are the same code points (UTF-8 bytes), as Python's `==` compares;
    /// Swift's `==` is canonical equivalence, which must not decide permissions.
    package func isExactly(_ other: String) -> Bool { utf8.elementsEqual(other.utf8) }
}

extension Optional where Wrapped == String {
    /// ``Swift/String/isExactly(_:)`` of two optional strings (`nil` equals only `nil`).
    package func isExactly(_ other: String?) -> Bool {
        switch (self, other) {
        case (nil, nil): true
        case let (lhs?, rhs?): lhs.isExactly(rhs)
        default: false
        }
    }
}
