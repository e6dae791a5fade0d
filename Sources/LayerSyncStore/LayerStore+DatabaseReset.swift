import LayerSyncModel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Reset for a database migration (Instant's `needsResetForDatabaseMigration` states,
/// docs/architecture.md §4, §8): a `layer.sqlite` whose `user_version` is newer than this library
/// opens without a connection (nothing is written to it); ``salvageAndMoveAside()`` reads its
/// pending local changes with plain SELECTs into `layer.salvage.json`, moves the file aside as
/// `layer.sqlite.schema-N.bak`, and ``installFreshDatabase()`` creates an empty current store.
/// The salvage file stays until ``requeueSalvaged(_:)`` committed its edits, so a failed reset
/// is retried (a store directory with a salvage file also opens in the needs-reset mode).
extension LayerStore {
    /// Why the store needs a reset.
    struct ResetState: Sendable {
        /// The `user_version` of the store found on disk.
        var schemaVersion: Int64
    }

    /// One pending local change read from the old store.
    package struct SalvagedEdit: Sendable, Equatable {
        var recordID: String
        var operation: PendingChange.Operation
        var content: String?
    }

    static let salvageFileName = "layer.salvage.json"

    /// Whether the store needs a reset for a database migration (no connection until then).
    package var needsDatabaseReset: Bool { resetState.withLock { $0 != nil } }

    private var databasePath: String { directory + "/layer.sqlite" }
    private var salvagePath: String { directory + "/" + Self.salvageFileName }

    /// Reads the pending changes of the old store (and those salvaged by an earlier failed
    /// attempt), writes them durably to the salvage file, and moves the old store aside.
    /// - Returns: The edits to re-queue, and an error describing changes that could not be read
    ///   (the old file is kept as `.bak` then), or `nil`.
    /// - Throws: `.couldNotWriteToDisk` when the salvage file cannot be written or the store
    ///   cannot be moved (nothing is lost: the old file stays in place).
    package func salvageAndMoveAside() throws(LayerSyncError) -> (edits: [SalvagedEdit], loss: LayerSyncError?) {
        var edits = try Self.readSalvageFile(salvagePath)
        var loss: LayerSyncError?
        let version: Int64? = StorageLayout.fileExists(databasePath) ? {
            guard let db = try? SQLiteDatabase(path: databasePath) else { return nil }
            return (try? db.query("PRAGMA user_version").first?.first?.integer) ?? nil
        }() : nil
        if let version, version > Self.schemaVersion {
            let backup = Self.freePath(databasePath + ".schema-\(version).bak")
            do throws(LayerSyncError) {
                let db = try SQLiteDatabase(path: databasePath)
                var skipped = 0
                for row in try db.query("SELECT record_id, op, content FROM pending_changes ORDER BY seq") {
                    guard row.count >= 3, let id = row[0].text, let op = row[1].text.flatMap(PendingChange.Operation.init(rawValue:)),
                          op == .delete || row[2].text != nil else {
                        skipped += 1
                        continue
                    }
                    edits.append(SalvagedEdit(recordID: id, operation: op, content: op == .delete ? nil : row[2].text))
                }
                if skipped > 0 {
                    loss = LayerSyncError(.databaseAccessFailed,
                                          "\(skipped) pending local change(s) of the schema-\(version) store could not be read; kept in \(backup)")
                }
            } catch {
                loss = LayerSyncError(.databaseAccessFailed,
                                      "the pending local changes of the schema-\(version) store could not be read (\(error.message)); kept in \(backup)")
            }
            try Self.writeSalvageFile(salvagePath, edits)
            for suffix in ["", "-wal"] where StorageLayout.fileExists(databasePath + suffix) {
                guard rename(databasePath + suffix, backup + suffix) == 0 else {
                    throw LayerSyncError(.couldNotWriteToDisk, "cannot move \(databasePath + suffix) aside: \(String(cString: strerror(errno)))")
                }
            }
            unlink(databasePath + "-shm")
        } else {
            // A store created by an earlier failed attempt (or none): it holds only downloaded data.
            if StorageLayout.fileExists(salvagePath) == false { try Self.writeSalvageFile(salvagePath, edits) }
            for suffix in ["", "-wal", "-shm"] { unlink(databasePath + suffix) }
        }
        return (edits, loss)
    }

    /// Creates the current schema in a new `layer.sqlite` and opens the store on it.
    package func installFreshDatabase() throws(LayerSyncError) {
        let file = Glibc.open(databasePath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if file >= 0 { Glibc.close(file) }
        let path = databasePath
        let failure: LayerSyncError? = database.withLock { slot in
            do throws(LayerSyncError) {
                let db = try SQLiteDatabase(path: path)
                try Self.migrate(db)
                slot = db
                return nil
            } catch {
                return error
            }
        }
        invalidateCache()
        if let failure { throw failure }
    }

    /// After a failed reset: drops the connection; the store needs a reset again.
    package func abandonReset() {
        database.withLock { $0 = nil }
        invalidateCache()
        resetState.withLock { state in if state == nil { state = ResetState(schemaVersion: Self.schemaVersion) } }
    }

    /// Re-queues salvaged edits onto the freshly downloaded snapshot, in one transaction, then
    /// removes the salvage file and leaves the needs-reset mode.
    /// - Throws: `.databaseAccessFailed` (nothing re-queued; the salvage file stays).
    package func requeueSalvaged(_ edits: [SalvagedEdit]) throws(LayerSyncError) {
        try transaction(.full) { db throws(LayerSyncError) in
            for edit in edits {
                let row = try db.query("SELECT content FROM records WHERE id = ?", [.text(edit.recordID)]).first
                switch edit.operation {
                case .create, .update:
                    guard let content = edit.content else { continue }
                    if row != nil {
                        try db.query("UPDATE records SET content = ? WHERE id = ?", [.text(content), .text(edit.recordID)])
                        try Self.enqueue(db, recordID: edit.recordID, operation: .update, content: content)
                    } else {
                        try db.query("INSERT INTO records(id, content) VALUES (?, ?)", [.text(edit.recordID), .text(content)])
                        try Self.enqueue(db, recordID: edit.recordID, operation: .create, content: content)
                    }
                case .delete:
                    guard case .text? = row?.first else { continue }
                    try db.query("UPDATE records SET content = NULL WHERE id = ?", [.text(edit.recordID)])
                    try Self.enqueue(db, recordID: edit.recordID, operation: .delete, content: nil)
                }
            }
        }
        unlink(salvagePath)
        resetState.withLock { $0 = nil }
    }

    // MARK: Salvage file

    private static func freePath(_ path: String) -> String {
        var candidate = path
        var counter = 1
        while StorageLayout.fileExists(candidate) {
            candidate = path + ".\(counter)"
            counter += 1
        }
        return candidate
    }

    private static func readSalvageFile(_ path: String) throws(LayerSyncError) -> [SalvagedEdit] {
        guard StorageLayout.fileExists(path) else { return [] }
        guard let file = fopen(path, "rb") else {
            throw LayerSyncError(.databaseAccessFailed, "cannot read \(path): \(String(cString: strerror(errno)))")
        }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            if count <= 0 { break }
            bytes += buffer[0..<count]
        }
        guard case .array(let items) = try JSONValue.parse(bytes: bytes) else {
            throw LayerSyncError(.databaseAccessFailed, "\(path) is not a JSON array")
        }
        return items.compactMap { item in
            guard let id = item["id"]?.stringValue,
                  let op = item["op"]?.stringValue.flatMap(PendingChange.Operation.init(rawValue:)) else { return nil }
            return SalvagedEdit(recordID: id, operation: op, content: item["content"]?.stringValue)
        }
    }

    private static func writeSalvageFile(_ path: String, _ edits: [SalvagedEdit]) throws(LayerSyncError) {
        let text = JSONValue.array(edits.map { edit in
            var members: [(String, JSONValue)] = [("id", .string(edit.recordID)), ("op", .string(edit.operation.rawValue))]
            if let content = edit.content { members.append(("content", .string(content))) }
            return .object(JSONObject(members))
        }).jsonText
        let partial = path + ".part"
        let descriptor = Glibc.open(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw LayerSyncError(.couldNotWriteToDisk, "cannot create \(partial): \(String(cString: strerror(errno)))")
        }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        let synced = fsync(descriptor) == 0
        Glibc.close(descriptor)
        guard written == bytes.count, synced, rename(partial, path) == 0 else {
            unlink(partial)
            throw LayerSyncError(.couldNotWriteToDisk, "cannot write \(path)")
        }
    }
}
