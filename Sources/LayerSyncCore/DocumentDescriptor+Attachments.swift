import LayerSyncModel
import LayerSyncStore
import LayerSyncTransport

#if canImport(Glibc)
import Glibc
#endif

/// Attachments: binary blobs referenced by records (`imageAttachmentId`, `fileAttachmentId`),
/// content-addressed by the lowercase hex SHA-256 of their bytes, stored per document in
/// `<document>/attachments/<sha256>` (0600). Added ones are uploaded at the start of the next
/// sync cycle, before any record change is sent, so a record never reaches the server before
/// the attachment it references. Downloaded lazily, on request.
extension DocumentDescriptor {
    /// The directory of the document's attachments.
    var attachmentsDirectory: String { context.layout.documentDirectory(documentID) + "/attachments" }

    /// Stores an attachment durably and queues its upload (Instant's attachment data providers).
    /// - Parameters:
    ///   - bytes: The data (may be empty).
    ///   - contentType: Its MIME type, e.g. `image/png` (printable ASCII, no spaces around).
    /// - Returns: The attachment id (SHA-256 hex); adding the same bytes again gives the same id.
    /// - Throws: `.invalidArgument` (content type), `.couldNotCreateAttachment` (the file
    ///   cannot be written), `.notDownloaded`, `.invalidState`, `.databaseAccessFailed`.
    public func addAttachment(bytes: [UInt8], contentType: String) throws(LayerSyncError) -> String {
        try requireDownloaded()
        guard !contentType.isEmpty, contentType.utf8.count <= 255,
              contentType.utf8.allSatisfy({ (0x21...0x7e).contains($0) || $0 == 0x20 }) else {
            throw LayerSyncError(.invalidArgument, "content_type must be 1–255 printable ASCII characters")
        }
        let id = SHA256.hex(bytes)
        do {
            try writeAttachment(id: id, bytes: bytes)
        } catch {
            throw LayerSyncError(.couldNotCreateAttachment, error.message, documentID: documentID, attachmentID: id)
        }
        try store.addAttachment(id: id, contentType: contentType)
        didEditLocally()  // a queued upload is an unsynced local change
        return id
    }

    /// The bytes of a locally stored attachment.
    /// - Parameter id: The attachment id.
    /// - Returns: The bytes and content type.
    /// - Throws: `.invalidArgument` (not a SHA-256 hex id), `.attachmentNotLoaded` (a local
    ///   record references it but it is not downloaded yet: call ``downloadAttachment(id:completion:)``),
    ///   `.noSuchAttachment` (unknown here, or, under a `collaboration_permissions` claim, used
    ///   by no record the token may view: ``requireReadableAttachment(_:)``),
    ///   `.couldNotReadFromDiskCache`, plus the common errors.
    public func attachmentData(id: String) throws(LayerSyncError) -> (bytes: [UInt8], contentType: String) {
        try requireDownloaded()
        guard SHA256.isDigest(id) else {
            throw LayerSyncError(.invalidArgument, "an attachment id is 64 lowercase hex digits", attachmentID: id)
        }
        try requireReadableAttachment(id)
        let path = attachmentsDirectory + "/" + id
        guard StorageLayout.fileExists(path) else {
            let referenced = try store.referencedAttachmentIDs().contains(id)
            let known = try store.attachmentContentType(id: id) != nil
            if referenced || known {
                throw LayerSyncError(.attachmentNotLoaded, "attachment \(id) is not downloaded yet", documentID: documentID, attachmentID: id)
            }
            throw LayerSyncError(.noSuchAttachment, "no attachment \(id) in this document", documentID: documentID, attachmentID: id)
        }
        guard let bytes = Self.readFile(path) else {
            throw LayerSyncError(.couldNotReadFromDiskCache, "cannot read \(path)", documentID: documentID, attachmentID: id)
        }
        return (bytes, try store.attachmentContentType(id: id) ?? "application/octet-stream")
    }

    /// Downloads an attachment from the server into the local cache (verifying its hash).
    /// Completion JSON: `{"attachment_id", "size_bytes", "content_type"}`; errors:
    /// `.noSuchAttachment` (404, or refused before asking by ``requireReadableAttachment(_:)``),
    /// `.invalidServerData` (bytes do not hash to the id),
    /// `.couldNotCreateAttachment`, `.requestFailed`, `.accessDenied`.
    /// - Parameters:
    ///   - id: The attachment id.
    ///   - completion: Called once on the event thread.
    /// - Throws: `.invalidArgument`, `.notDownloaded`, `.invalidState`.
    public func downloadAttachment(id: String, completion: @escaping OperationCompletion) throws(LayerSyncError) {
        guard SHA256.isDigest(id) else {
            throw LayerSyncError(.invalidArgument, "an attachment id is 64 lowercase hex digits", attachmentID: id)
        }
        try runOperation(completion, capability: "attachments", notFound: .noSuchAttachment) { token, cancellation throws(LayerSyncError) in
            try self.requireReadableAttachment(id)
            let (bytes, contentType) = try self.context.server.getAttachment(documentID: self.documentID, id: id, jwt: token,
                                                                             session: self.workSession, cancellation: cancellation)
            guard SHA256.hex(bytes) == id else {
                throw LayerSyncError(.invalidServerData, "the server's attachment does not hash to \(id)", attachmentID: id)
            }
            do throws(LayerSyncError) {
                try self.writeAttachment(id: id, bytes: bytes)
            } catch {
                throw LayerSyncError(.couldNotCreateAttachment, error.message, attachmentID: id)
            }
            try self.store.noteDownloadedAttachment(id: id, contentType: contentType)
            return JSONValue.object(JSONObject([("attachment_id", .string(id)), ("size_bytes", .integer(Int64(bytes.count))),
                                                ("content_type", .string(contentType))])).jsonText
        }
    }

    /// The server's rule for reading an attachment (docs/protocol.md "Collaboration
    /// permissions", attachments), applied to the local copy: without a claim every attachment
    /// of the document is readable; under one, only an attachment that a live record of this
    /// layer the token may view mentions in its content, or one added here and not uploaded yet
    /// (the user holds those bytes). Else it is not found, as the server answers 404, so bytes
    /// cached under a wider grant stay out of reach after a narrowing reauthentication.
    /// - Throws: `.noSuchAttachment`, `.databaseAccessFailed`.
    func requireReadableAttachment(_ id: String) throws(LayerSyncError) {
        let grant = self.grant
        guard grant.isRestricted else { return }
        if try store.recordsMentioning(id).contains(where: { grant.allows(.view, $0.ownership) }) { return }
        if try store.pendingAttachments().contains(where: { $0.id == id }) { return }
        throw LayerSyncError(.noSuchAttachment, "no attachment \(id) in this document", documentID: documentID, attachmentID: id)
    }

    /// Uploads every attachment added locally that the server does not have yet (sync cycle).
    /// An attachment whose file vanished (removed behind the engine's back) can never be
    /// uploaded: it is dropped from the queue and reported through `didRejectChanges`
    /// (reason `attachment_missing`, the attachment id as record id) instead of blocking
    /// every later cycle (docs/rules.md rule 5, in spirit).
    func uploadPendingAttachments(token: String, cancellation: TransferCancellation) throws(LayerSyncError) {
        for (id, contentType) in try store.pendingAttachments() {
            guard let bytes = Self.readFile(attachmentsDirectory + "/" + id) else {
                report(try store.dropPendingAttachment(id: id))
                continue
            }
            try context.server.putAttachment(documentID: documentID, id: id, bytes: bytes, contentType: contentType, jwt: token,
                                             session: workSession, cancellation: cancellation)
            try store.markAttachmentUploaded(id: id)
        }
    }

    /// Writes `<attachments>/<id>` atomically (temporary file, fsync, rename); no-op if present.
    private func writeAttachment(id: String, bytes: [UInt8]) throws(LayerSyncError) {
        let path = attachmentsDirectory + "/" + id
        if StorageLayout.fileExists(path) { return }
        try StorageLayout.createDirectory(attachmentsDirectory)
        let partial = path + ".part"
        let descriptor = open(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw LayerSyncError(.couldNotWriteToDisk, "cannot create \(partial): \(String(cString: strerror(errno)))")
        }
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written <= 0 {
                close(descriptor)
                unlink(partial)
                throw LayerSyncError(.couldNotWriteToDisk, "cannot write \(partial): \(String(cString: strerror(errno)))")
            }
            offset += written
        }
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard synced, rename(partial, path) == 0 else {
            unlink(partial)
            throw LayerSyncError(.couldNotWriteToDisk, "cannot store \(path)")
        }
    }

    static func readFile(_ path: String) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count < 0 { return nil }
            if count == 0 { return bytes }
            bytes += buffer[0..<count]
        }
    }
}
