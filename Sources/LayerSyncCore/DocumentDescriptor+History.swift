import LayerSyncModel
import LayerSyncTransport

/// Record history, rollback, the deleted list and restore: one-shot server operations
/// (protocol.md `GET .../history`, `POST .../rollback`, `GET .../deleted`,
/// `POST .../restore`). Each returns at once and runs on the document's work queue (in order
/// with sync cycles); its completion is called exactly once on the client's event thread,
/// in order with the events — unless the client shuts down first. A rollback or restore is
/// a normal change on the server: its result is applied to the local store and reported
/// through `didReceiveChanges` before the completion runs.
///
/// Errors passed to the completion: `.featureUnsupported` (the server does not advertise the
/// capability: `history`, `rollback`, `deleted-restore`, `attachments`), `.noSuchAnnotation` (the server keeps no such record or
/// version), `.conflict` (the record changed on the server since this client last saw it,
/// or a restore of a live record), `.invalidRequest` (rolling back to a deletion),
/// `.accessDenied`, `.requestFailed`, `.cancelled`. Thrown at once: `.notDownloaded`,
/// `.invalidState`, and for history/rollback/restore `.unmanagedAnnotation` when the record
/// exists only locally (created offline, never confirmed by the server, which therefore keeps
/// nothing of it): no request is made.
extension DocumentDescriptor {
    /// The completion of a one-shot server operation: JSON text, or the error.
    public typealias OperationCompletion = @Sendable (Result<String, LayerSyncError>) -> Void

    /// The kept versions of a record, newest first:
    /// `[{"id", "revision", "deleted", "content": record-or-null}]`.
    /// - Parameters:
    ///   - id: The record id.
    ///   - completion: Receives the JSON array.
    public func annotationHistory(id: String, completion: @escaping OperationCompletion) throws(LayerSyncError) {
        try requireServerManaged(id)
        try runOperation(completion, capability: "history") { token, cancellation throws(LayerSyncError) in
            let versions = try self.context.server.history(documentID: self.documentID, layer: self.layerName, recordID: id,
                                                           jwt: token, session: self.workSession, cancellation: cancellation)
            return JSONValue.array(versions.map(Self.recordJSON)).jsonText
        }
    }

    /// Writes the content of kept version `revision` as the record's new version (a deleted
    /// record comes back). Refused with `.conflict` if the server's record is not at the
    /// revision this client last saw.
    /// - Parameters:
    ///   - id: The record id.
    ///   - revision: A revision from ``annotationHistory(id:completion:)``.
    ///   - completion: Receives the record's new Instant JSON.
    public func rollbackAnnotation(id: String, revision: Int64, completion: @escaping OperationCompletion) throws(LayerSyncError) {
        try requireServerManaged(id)
        try runOperation(completion, capability: "rollback") { token, cancellation throws(LayerSyncError) in
            let base = try self.store.knownServerRevision(id: id)
            let record = try self.context.server.revive("rollback", documentID: self.documentID, layer: self.layerName,
                                                        recordID: id, revision: revision, baseRevision: base, jwt: token,
                                                        session: self.workSession, cancellation: cancellation)
            return try self.adoptRevived(record)
        }
    }

    /// The layer's deleted records that can be restored:
    /// `[{"id", "revision", "last_content": record-or-null}]`, oldest deletion first.
    /// - Parameter completion: Receives the JSON array.
    public func listDeletedAnnotations(completion: @escaping OperationCompletion) throws(LayerSyncError) {
        try runOperation(completion, capability: "deleted-restore") { token, cancellation throws(LayerSyncError) in
            let entries = try self.context.server.deleted(documentID: self.documentID, layer: self.layerName, jwt: token,
                                                          session: self.workSession, cancellation: cancellation)
            return JSONValue.array(entries.map { entry in
                .object(JSONObject([("id", .string(entry.id)), ("revision", .integer(entry.revision)),
                                    ("last_content", entry.lastContent ?? .null)]))
            }).jsonText
        }
    }

    /// Brings a deleted record back with its last live content.
    /// - Parameters:
    ///   - id: The record id.
    ///   - completion: Receives the record's Instant JSON.
    public func restoreAnnotation(id: String, completion: @escaping OperationCompletion) throws(LayerSyncError) {
        try requireServerManaged(id)
        try runOperation(completion, capability: "deleted-restore") { token, cancellation throws(LayerSyncError) in
            let record = try self.context.server.revive("restore", documentID: self.documentID, layer: self.layerName,
                                                        recordID: id, revision: nil, baseRevision: nil, jwt: token,
                                                        session: self.workSession, cancellation: cancellation)
            return try self.adoptRevived(record)
        }
    }

    // MARK: Plumbing

    /// Throws `.unmanagedAnnotation` for a record that exists only locally (Instant's
    /// `unmanagedAnnotation`: the server does not manage it until its creation is synced).
    func requireServerManaged(_ id: String) throws(LayerSyncError) {
        try requireDownloaded()
        if try store.isLocalOnly(id: id) {
            throw LayerSyncError(.unmanagedAnnotation, "the record '\(id)' exists only locally (never synced); the server keeps no versions of it",
                                 documentID: documentID, recordID: id)
        }
    }

    func runOperation(_ completion: @escaping OperationCompletion, capability: String, notFound: ErrorCode = .noSuchAnnotation,
                              _ body: @escaping @Sendable (String, TransferCancellation) throws(LayerSyncError) -> String) throws(LayerSyncError) {
        try requireDownloaded()
        guard !context.isShutDown else { throw LayerSyncError(.invalidState, "the client is shut down") }
        workQueue.async { [self] in
            let cancellation = TransferCancellation()
            mutableState.withLock { $0.operation = cancellation }
            let token = jwt
            let result: Result<String, LayerSyncError>
            do throws(LayerSyncError) {
                guard !context.isShutDown else { throw LayerSyncError(.cancelled, "the client is shut down") }
                if let info = context.serverInfo.withLock({ $0 }), !info.capabilities.contains(capability) {
                    throw LayerSyncError(.featureUnsupported, "the server does not offer \"\(capability)\" (GET /sync/v1/info capabilities)")
                }
                result = .success(try body(token, cancellation))
            } catch {
                var error = error.with(documentID: documentID)
                if error.httpStatus == 404 { error.code = notFound }
                result = .failure(error)
                if error.code == .accessDenied, error.httpStatus != nil { noteAuthenticationFailure(error, token: token) }
            }
            mutableState.withLock { $0.operation = nil }
            context.events.perform { completion(result) }
        }
    }

    /// Applies a record written by rollback/restore to the local store and reports it.
    private func adoptRevived(_ record: ServerRecord) throws(LayerSyncError) -> String {
        report(try store.applyServerRecords([record], since: nil, durability: store.localWriteDurability))
        publishState()
        return record.contentText ?? "null"
    }

    static func recordJSON(_ record: ServerRecord) -> JSONValue {
        .object(JSONObject([("id", .string(record.id)), ("revision", .integer(record.revision)),
                            ("deleted", .bool(record.deleted)), ("content", record.content ?? .null)]))
    }
}
