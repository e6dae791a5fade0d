import LayerSyncModel

/// Comments (Instant JSON `pspdfkit/comment` records with a `rootId`) and full-text search.
/// Common errors as for the record methods (``createAnnotation(json:)``).
extension DocumentDescriptor {
    /// Creates a comment on a root annotation (Instant's comment threads). Deleting the root
    /// later deletes its comments, locally and on the server.
    /// - Parameters:
    ///   - rootID: The id of the live record the comment belongs to.
    ///   - json: An Instant JSON object; `type` defaults to `pspdfkit/comment` (another type is
    ///     refused), `rootId` is set to `rootID` (a different one is refused), `pageIndex`
    ///     defaults to the root's, `id` and `v` as for ``createAnnotation(json:)``; the result
    ///     must pass the record schema (`pspdfkit/comment` needs `text` and `pageIndex`).
    /// - Returns: The stored JSON.
    /// - Throws: `.noSuchAnnotation` when the root does not exist (or the token may not view
    ///   it), `.forbidden` without `reply` on the thread (or `write`), `.invalidJSONStructure`,
    ///   `.invalidArgument`, plus the common errors.
    public func createComment(rootID: String, json: String) throws(LayerSyncError) -> String {
        try requireDownloaded()
        guard case .object(var object) = try JSONValue.parse(json) else {
            throw LayerSyncError(.invalidJSONStructure, "a comment must be a JSON object")
        }
        if let type = object["type"], type.stringValue != "pspdfkit/comment" {
            throw LayerSyncError(.invalidJSONStructure, "a comment's \"type\" must be \"pspdfkit/comment\"")
        }
        if let given = object["rootId"], given.stringValue != rootID {
            throw LayerSyncError(.invalidArgument, "the comment's \"rootId\" differs from root_id")
        }
        guard let rootRecord = try store.storedRecord(id: rootID), grant.allows(.view, rootRecord.ownership) else {
            throw LayerSyncError(.noSuchAnnotation, "no annotation with id \(rootID) to comment on", documentID: documentID, recordID: rootID)
        }
        let root = rootRecord.content
        object["type"] = .string("pspdfkit/comment")
        object["rootId"] = .string(rootID)
        // Instant JSON requires a comment's pageIndex (docs/protocol.md, "Record schema"): the root's.
        if object["pageIndex"] == nil, let page = try? JSONValue.parse(root)["pageIndex"] { object["pageIndex"] = page }
        return try createAnnotation(json: JSONValue.object(object).jsonText)
    }

    /// The comments of a root annotation, oldest first (by `createdAt`, then id).
    /// - Parameter rootID: The root's id.
    /// - Returns: A JSON array of comment records.
    /// - Throws: `.noSuchAnnotation` when the root does not exist, plus the common errors.
    public func listComments(rootID: String) throws(LayerSyncError) -> String {
        try requireDownloaded()
        do {
            _ = try visibleRecord(rootID)
            return try handOut(try store.storedComments(rootID: rootID))
        } catch {
            throw error.with(documentID: documentID)
        }
    }

    /// The number of results of ``searchAnnotations(query:limit:)`` when no limit is given.
    public static let defaultSearchLimit: Int64 = 100

    /// Full-text search over the string values of the local records (SQLite FTS5): every
    /// word of `query` must occur as a word prefix, case- and diacritics-insensitively.
    /// - Parameters:
    ///   - query: The words.
    ///   - limit: Maximum number of results; 0 (the default) means ``defaultSearchLimit``.
    /// - Returns: A JSON array of matching records, best match first.
    /// - Throws: `.invalidArgument` for a negative limit (checked first) or a query without words,
    ///   plus the common errors.
    public func searchAnnotations(query: String, limit: Int64 = 0) throws(LayerSyncError) -> String {
        guard limit >= 0 else { throw LayerSyncError(.invalidArgument, "limit must not be negative") }
        try requireDownloaded()
        let count = limit == 0 ? Self.defaultSearchLimit : limit
        return try handOut(try store.searchStoredRecords(query: query, limit: count))
    }
}
