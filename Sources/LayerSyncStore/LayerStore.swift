import LayerSyncModel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The local store of one document layer: `layer.sqlite` plus an exclusive `flock` on
/// the `lock` file next to it (docs/rules.md rule 8, docs/architecture.md §8).
///
/// Durability: WAL journal. Writes made for an API call commit with ``localWriteDurability``:
/// `synchronous=FULL` by default, so they are on disk when the call returns (docs/rules.md rule 1), not only
/// after the next checkpoint; `.relaxed` when every client that opened the store asked for it
/// (`LAYERSYNC_DURABILITY_NORMAL`), and then a batch is frozen with an fsync before it is sent
/// if such a write is not durable yet (``nextBatch(_:)``). The engine's own writes (server data,
/// answers, freezing a batch of durable changes) commit without an fsync
/// (``CommitDurability/relaxed``), which is safe after a power loss because every unfrozen
/// change is sealed when the store opens (``sealPendingChanges(_:)``; docs/durability.md).
/// Within a process every opener of the same directory shares one instance
/// (``open(directory:localWriteDurability:)``); a second process gets `.storageLocked`.
///
/// Tables (schema version 7, `PRAGMA user_version`; version 1 lacked `records_fts`,
/// version 2 `attachments`, version 3 indexed records for search by triggers on every write,
/// version 4 had a UNIQUE index on `pending_changes.change_id`, version 5 lacked
/// `rejected_changes`, version 6 lacked record ownership):
/// - `records`: `content` is the local view (NULL when deleted locally), `created_by`,
///   `updated_by`, `grp` its ownership (collaboration permissions); index `records_root` on
///   the live records' ``rootIDExpression`` (the replies of a record).
///   `server_revision`/`server_content`/`server_deleted`/`server_created_by`/
///   `server_updated_by`/`server_grp` the last known server version
///   (`server_revision` NULL = the server has never confirmed this record).
/// - `pending_changes`: the outgoing queue, see ``PendingChange`` (`grp`/`grp_given`: the
///   group a change sends).
/// - `meta`: `epoch`, `since`, `user_id`, `client_id`, `downloaded`, `document_id`, `layer_name`,
///   `default_group_override` (the host's ``setDefaultGroupOverride(_:)``),
///   `applied_permissions`/`applied_user_id` (the collaboration permissions and user the local
///   records were last filtered for by the server; see LayerStore+Permissions.swift).
/// - `records_fts` (FTS5, rowid = `records.rowid`): the string values of each live record's
///   content, for ``searchRecords(query:limit:)``. Indexed lazily: a write only sets
///   `records.fts_stale` (same row, no FTS pages); ``indexStaleRecords(_:)`` brings the
///   index up to date in one batch before each search and after a snapshot.
/// - `snapshot_staging`: the pages of a snapshot being downloaded, merged into `records`
///   in one transaction when the last page arrived (see ``finishSnapshot(epoch:revision:reportChanges:)``).
/// - `attachments`: attachments added through this layer (`id` = SHA-256 hex, the bytes live
///   in the document's `attachments/` directory), `uploaded` 0 until the server has them.
/// - `rejected_changes`: conflict reports (a local change that lost, with both versions),
///   written in the transaction that adopted the server version and kept until the host
///   acknowledged them; see LayerStore+RejectionReports.swift.
package final class LayerStore: Sendable {
    /// Schema version stored in `PRAGMA user_version`.
    static let schemaVersion: Int64 = 7

    /// A record's `rootId` (`NULL` when it has none or its content is not JSON), as index
    /// `records_root` (created when a store opens, outside the schema versions) holds it: a
    /// query finds replies through the index only when it spells the expression exactly so
    /// (with `content IS NOT NULL`, the index's condition).
    static let rootIDExpression = "CASE WHEN json_valid(content) THEN json_extract(content, '$.rootId') END"

    /// The layer directory.
    package let directory: String
    /// The connection; `nil` once ``close()`` ran (local storage removed).
    /// `nil` also while the store needs (or runs) a reset for a schema migration
    /// (see LayerStore+DatabaseReset.swift).
    let database: Mutex<SQLiteDatabase?>
    /// The schema version of a store newer than this library (or, after a failed reset, of the
    /// moved-aside one) while it needs a reset; `nil` otherwise.
    let resetState: Mutex<ResetState?>
    private let lockDescriptor: Atomic<Int32>
    /// Values the hot paths read on every call (state, `requireDownloaded`), cached so that a
    /// local edit costs no extra queries. Read and written only under the `database` lock
    /// (lock order: `database`, then `cache`); `nil` = unknown, read from the database.
    private let cache = Mutex(Cache())
    /// The durability openers asked for API writes; `nil` until one did (API writes are then
    /// `.full`). Only ever strengthened: see ``open(directory:localWriteDurability:)``.
    private let requestedLocalWriteDurability = Mutex<CommitDurability?>(nil)
    /// `commitCounts.full` of the connection when the last `.relaxed` API write that rewrote a
    /// queued change in place (coalescing) committed, -1 if none: while it still equals the
    /// count, no FULL commit has made that rewrite durable, and the next freeze must fsync
    /// (``hasUnsyncedLocalWrites(_:)``). A relaxed write that only adds or removes queue rows
    /// needs no such fsync: lost in a power loss, its change id is gone with it and is never
    /// reused (docs/durability.md). Written and read under the `database` lock.
    private let relaxedLocalWriteMark = Atomic<Int>(-1)

    private struct Cache: Sendable {
        var pendingChanges: Int?
        var pendingAttachments: Int?
        var downloaded: Bool?
        var contentVersion: Int??
        var defaultGroupOverride: String??
    }

    private struct Registration: Sendable {
        weak var store: LayerStore?
    }

    private static let registry = Mutex<[String: Registration]>([:])

    /// Opens the store of a layer directory, or returns the instance already open in this process.
    ///
    /// All openers in a process share one store, so they share its ``localWriteDurability``:
    /// the strictest request wins. API writes are `.relaxed` only while every opener that asked
    /// asked for `.relaxed`; once one asked for `.full` they stay `.full` for the life of this
    /// instance (until every handle is gone or ``close()`` runs), even after that opener is gone.
    /// A client asking for `.relaxed` may thus get FULL commits, never the other way round.
    /// - Parameters:
    ///   - directory: The layer directory (created 0700 if absent).
    ///   - localWriteDurability: How this opener wants API writes to commit (its client's
    ///     ``ClientConfiguration/localWriteDurability``); `nil` for an opener that makes no API
    ///     writes (listing or removing local storage) and has no say.
    /// - Returns: The shared store.
    /// - Throws: `.storageLocked` if another process holds it, `.couldNotWriteToDisk`,
    ///   `.databaseAccessFailed`.
    package static func open(directory: String, localWriteDurability: CommitDurability? = nil) throws(LayerSyncError) -> LayerStore {
        let result: Result<LayerStore, LayerSyncError> = registry.withLock { registry in
            if let store = registry[directory]?.store { return .success(store) }
            do throws(LayerSyncError) {
                let store = try LayerStore(directory: directory)
                registry[directory] = Registration(store: store)
                return .success(store)
            } catch {
                return .failure(error)
            }
        }
        let store = try result.get()
        if let localWriteDurability { store.requestLocalWriteDurability(localWriteDurability) }
        return store
    }

    /// Records an opener's request (see ``open(directory:localWriteDurability:)``): the
    /// strictest one wins.
    private func requestLocalWriteDurability(_ durability: CommitDurability) {
        requestedLocalWriteDurability.withLock { current in
            if current != .full { current = durability }
        }
    }

    /// How a write made for an API call commits: `.full` unless every opener that asked for a
    /// durability asked for `.relaxed` (``open(directory:localWriteDurability:)``). This is what
    /// ``withDatabase(_:_:)``, ``transaction(_:_:)``, ``localEdit(_:_:)`` and ``setMeta(_:_:durability:)``
    /// use when given no durability.
    package var localWriteDurability: CommitDurability {
        requestedLocalWriteDurability.withLock { $0 } ?? .full
    }

    /// How a transaction commits: `.full` when it may freeze a batch (`freezing`) while a
    /// relaxed rewrite of a queued change is not durable yet (``hasUnsyncedLocalWrites(_:)``),
    /// so that it is on disk before the batch is sent; else the mode ``withDatabase(_:_:)``
    /// set. Call under the `database` lock.
    func freezeDurability(_ db: SQLiteDatabase, freezing: Bool) -> CommitDurability {
        freezing && hasUnsyncedLocalWrites(db) ? .full : db.autocommitDurability
    }

    /// Whether a `.relaxed` API write that rewrote a queued change has committed since the
    /// connection's last FULL commit (a power loss could still undo the rewrite and leave the
    /// change's id with its older content). Call under the `database` lock.
    func hasUnsyncedLocalWrites(_ db: SQLiteDatabase) -> Bool {
        relaxedLocalWriteMark.load(ordering: .relaxed) == db.commitCounts.full
    }

    private init(directory: String) throws(LayerSyncError) {
        try StorageLayout.createDirectory(directory)
        self.directory = directory
        let lockPath = directory + "/lock"
        let descriptor = Glibc.open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw LayerSyncError(.couldNotWriteToDisk, "cannot open \(lockPath): \(String(cString: strerror(errno)))")
        }
        // A store of this process that is being deallocated may still hold the lock for a moment.
        var attempts = 0
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            let error = errno
            attempts += 1
            if error == EWOULDBLOCK, attempts < 20 {
                usleep(10_000)
                continue
            }
            Glibc.close(descriptor)
            if error == EWOULDBLOCK {
                throw LayerSyncError(.storageLocked, "the layer store \(directory) is used by another process")
            }
            throw LayerSyncError(.couldNotWriteToDisk, "cannot lock \(lockPath): \(String(cString: strerror(error)))")
        }
        lockDescriptor = Atomic(descriptor)
        let databasePath = directory + "/layer.sqlite"
        // Create the file ourselves so that it (and SQLite's -wal/-shm, which copy its mode) is 0600.
        let file = Glibc.open(databasePath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if file >= 0 { Glibc.close(file) }
        var db: SQLiteDatabase?
        var reset: ResetState?
        do {
            let opened = try SQLiteDatabase(path: databasePath)
            // Read the schema version before any pragma: a store newer than this library (or one
            // whose reset left salvaged edits behind) is not written to; it needs a reset.
            let version = try opened.query("PRAGMA user_version").first?.first?.integer ?? 0
            if version > Self.schemaVersion || StorageLayout.fileExists(directory + "/" + Self.salvageFileName) {
                reset = ResetState(schemaVersion: version)
            } else {
                try Self.migrate(opened)
                try Self.sealPendingChanges(opened)
                db = opened
            }
        } catch {
            Glibc.close(descriptor)
            throw error
        }
        database = Mutex(db)
        resetState = Mutex(reset)
    }

    deinit {
        let descriptor = lockDescriptor.exchange(-1, ordering: .acquiringAndReleasing)
        if descriptor >= 0 { Glibc.close(descriptor) }
    }

    /// Closes the connection and releases the layer lock, so that the directory can be
    /// removed; every later use throws `.invalidState`. Idempotent. Waits for a running
    /// transaction (it takes the store's lock).
    package func close() {
        database.withLock { $0 = nil }
        let descriptor = lockDescriptor.exchange(-1, ordering: .acquiringAndReleasing)
        if descriptor >= 0 { Glibc.close(descriptor) }
        Self.registry.withLock { registry in
            if registry[directory]?.store === self { registry[directory] = nil }
        }
    }

    /// The store of `directory` if this process has it open.
    static func openInstance(directory: String) -> LayerStore? {
        registry.withLock { $0[directory]?.store }
    }

    static func migrate(_ db: SQLiteDatabase) throws(LayerSyncError) {
        try db.execute("PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON;")
        try db.setDurability(.full)
        let version = try db.query("PRAGMA user_version").first?.first?.integer ?? 0
        if version > schemaVersion {
            throw LayerSyncError(.databaseAccessFailed, "layer store has schema \(version), newer than this library's \(schemaVersion)")
        }
        if version < 1 {
            try db.transaction { () throws(LayerSyncError) in
                try db.execute("""
                    CREATE TABLE records(
                        id TEXT PRIMARY KEY NOT NULL,
                        content TEXT,
                        server_revision INTEGER,
                        server_content TEXT,
                        server_deleted INTEGER NOT NULL DEFAULT 0);
                    CREATE TABLE pending_changes(
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        change_id TEXT NOT NULL UNIQUE,
                        record_id TEXT NOT NULL,
                        op TEXT NOT NULL CHECK (op IN ('create','update','delete')),
                        content TEXT,
                        attempted INTEGER NOT NULL DEFAULT 0,
                        base_revision INTEGER,
                        payload TEXT);
                    CREATE INDEX pending_changes_record ON pending_changes(record_id, seq);
                    CREATE TABLE meta(key TEXT PRIMARY KEY NOT NULL, value TEXT);
                    PRAGMA user_version = 1;
                    """)
                try db.query("INSERT INTO meta(key, value) VALUES ('client_id', ?)", [.text(ULID.generate())])
            }
        }
        if version < 2 {
            // Version 2: full-text search over records (SQLite FTS5, https://sqlite.org/fts5.html).
            try db.transaction { () throws(LayerSyncError) in
                try db.execute("""
                    CREATE VIRTUAL TABLE records_fts USING fts5(body, tokenize = 'unicode61 remove_diacritics 2');
                    CREATE TRIGGER records_fts_insert AFTER INSERT ON records WHEN NEW.content IS NOT NULL BEGIN
                        INSERT INTO records_fts(rowid, body)
                        SELECT NEW.rowid, group_concat(value, ' ') FROM json_tree(NEW.content) WHERE type = 'text';
                    END;
                    CREATE TRIGGER records_fts_delete AFTER DELETE ON records BEGIN
                        DELETE FROM records_fts WHERE rowid = OLD.rowid;
                    END;
                    CREATE TRIGGER records_fts_update AFTER UPDATE OF content ON records BEGIN
                        DELETE FROM records_fts WHERE rowid = OLD.rowid;
                        INSERT INTO records_fts(rowid, body)
                        SELECT NEW.rowid, group_concat(value, ' ') FROM json_tree(NEW.content) WHERE type = 'text'
                        AND NEW.content IS NOT NULL;
                    END;
                    INSERT INTO records_fts(rowid, body)
                    SELECT r.rowid, (SELECT group_concat(value, ' ') FROM json_tree(r.content) WHERE type = 'text')
                    FROM records r WHERE r.content IS NOT NULL;
                    PRAGMA user_version = 2;
                    """)
            }
        }
        if version < 3 {
            try db.transaction { () throws(LayerSyncError) in
                try db.execute("""
                    CREATE TABLE attachments(
                        id TEXT PRIMARY KEY NOT NULL,
                        content_type TEXT NOT NULL,
                        uploaded INTEGER NOT NULL DEFAULT 0);
                    PRAGMA user_version = 3;
                    """)
            }
        }
        if version < 4 {
            // Version 4: lazy full-text indexing (a local write touches no FTS5 pages) and
            // snapshot staging (a download is applied page by page, flipped in at the end).
            try db.transaction { () throws(LayerSyncError) in
                try db.execute("""
                    DROP TRIGGER IF EXISTS records_fts_insert;
                    DROP TRIGGER IF EXISTS records_fts_update;
                    ALTER TABLE records ADD COLUMN fts_stale INTEGER NOT NULL DEFAULT 1;
                    UPDATE records SET fts_stale = 0;
                    CREATE INDEX records_fts_stale ON records(fts_stale) WHERE fts_stale = 1;
                    CREATE TRIGGER records_fts_mark AFTER UPDATE OF content ON records WHEN NEW.fts_stale = 0 BEGIN
                        UPDATE records SET fts_stale = 1 WHERE rowid = NEW.rowid;
                    END;
                    CREATE TABLE snapshot_staging(
                        id TEXT PRIMARY KEY NOT NULL,
                        revision INTEGER NOT NULL,
                        content TEXT,
                        deleted INTEGER NOT NULL);
                    PRAGMA user_version = 4;
                    """)
            }
        }
        if version < 5 {
            // Version 5: `pending_changes.change_id` loses its UNIQUE index. The sync cycle finds
            // an answered change by its queue position (it keeps the changes it sent), so the
            // index only cost a B-tree insert per queued change and a delete per answered one.
            // Change ids are fresh ULIDs, never reused; an answer is still applied at most once
            // (its row, checked by position and change id, is gone afterwards). The table is
            // rebuilt with its rows, their positions and its AUTOINCREMENT counter (a position
            // is never used twice).
            try db.transaction { () throws(LayerSyncError) in
                try db.execute("""
                    CREATE TABLE pending_changes_v5(
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        change_id TEXT NOT NULL,
                        record_id TEXT NOT NULL,
                        op TEXT NOT NULL CHECK (op IN ('create','update','delete')),
                        content TEXT,
                        attempted INTEGER NOT NULL DEFAULT 0,
                        base_revision INTEGER,
                        payload TEXT);
                    INSERT INTO sqlite_sequence(name, seq)
                        SELECT 'pending_changes_v5', seq FROM sqlite_sequence WHERE name = 'pending_changes';
                    INSERT INTO pending_changes_v5(seq, change_id, record_id, op, content, attempted, base_revision, payload)
                        SELECT seq, change_id, record_id, op, content, attempted, base_revision, payload
                        FROM pending_changes ORDER BY seq;
                    DROP TABLE pending_changes;
                    ALTER TABLE pending_changes_v5 RENAME TO pending_changes;
                    CREATE INDEX pending_changes_record ON pending_changes(record_id, seq);
                    PRAGMA user_version = 5;
                    """)
            }
        }
        if version < 6 {
            // Version 6: conflict reports that survive a crash (LayerStore+RejectionReports.swift).
            // `seq` orders them; `id` (a ULID) is the stable id hosts see; `delivered` is 1 once a
            // `didRejectChanges` event carrying the report was handled.
            try db.transaction { () throws(LayerSyncError) in
                try db.execute("""
                    CREATE TABLE rejected_changes(
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        id TEXT NOT NULL UNIQUE,
                        change_id TEXT,
                        record_id TEXT NOT NULL,
                        reason TEXT NOT NULL,
                        local_content TEXT,
                        server_content TEXT,
                        delivered INTEGER NOT NULL DEFAULT 0);
                    CREATE INDEX rejected_changes_undelivered ON rejected_changes(seq) WHERE delivered = 0;
                    PRAGMA user_version = 6;
                    """)
            }
        }
        if version < 7 {
            // Version 7: record ownership for collaboration permissions (protocol.md "Record
            // shape"): `created_by`, `updated_by`, `grp` of the local view and `server_*` of the
            // last known server version, the same in `snapshot_staging`; a queued change's group
            // (`grp`, sent when `grp_given`). Existing rows have none (NULL), as records the
            // server stamped before ownership existed.
            // A column already there (a store a test or a downgrade rewound) is kept.
            try db.transaction { () throws(LayerSyncError) in
                let columns: [(table: String, column: String, type: String)] = [
                    ("records", "created_by", "TEXT"), ("records", "updated_by", "TEXT"), ("records", "grp", "TEXT"),
                    ("records", "server_created_by", "TEXT"), ("records", "server_updated_by", "TEXT"),
                    ("records", "server_grp", "TEXT"), ("snapshot_staging", "created_by", "TEXT"),
                    ("snapshot_staging", "updated_by", "TEXT"), ("snapshot_staging", "grp", "TEXT"),
                    ("pending_changes", "grp_given", "INTEGER NOT NULL DEFAULT 0"), ("pending_changes", "grp", "TEXT"),
                ]
                for (table, column, type) in columns {
                    let present = try db.query("SELECT 1 FROM pragma_table_info(?) WHERE name = ?", [.text(table), .text(column)])
                    if present.isEmpty { try db.execute("ALTER TABLE \(table) ADD COLUMN \(column) \(type);") }
                }
                try db.execute("PRAGMA user_version = 7;")
            }
        }
        // Live records by `rootId` (``rootIDExpression``) through an index, not a scan of every
        // record: the replies a delete takes with it, a thread's comments, and under
        // collaboration permissions the replies behind every record handed out (`isDeletable`,
        // a create's and an update's answer too). Not a schema version: SQLite maintains the
        // index for a library that does not know it as well, so a store that has it still opens
        // in the library before (a downgrade needs no reset).
        try db.execute("CREATE INDEX IF NOT EXISTS records_root ON records(\(rootIDExpression)) WHERE content IS NOT NULL;")
    }

    /// Runs `body` with the connection, under the store's lock.
    /// - Parameters:
    ///   - durability: How statements `body` runs outside a transaction commit (autocommit):
    ///     `nil` (default) for a write made for an API call, which commits with
    ///     ``localWriteDurability``; `.relaxed` only when every such write is the engine's own,
    ///     `.full` for one that must be durable in every mode (see ``CommitDurability``).
    ///   - body: The work; must not call back into the store.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws.
    func withDatabase<T: Sendable>(_ durability: CommitDurability? = nil,
                                   _ body: (SQLiteDatabase) throws(LayerSyncError) -> T) throws(LayerSyncError) -> T {
        let result: Result<T, LayerSyncError> = database.withLock { db in
            guard let db else { return .failure(LayerSyncError(.invalidState, "the layer's local storage was removed")) }
            let mode = durability ?? localWriteDurability
            let relaxedCommits = db.commitCounts.relaxed, rewritten = db.rewrittenPendingChanges
            defer {
                // An API write that rewrote a queued change and committed without an fsync: the
                // next freeze must make it durable before that change id is sent.
                if durability == nil, mode == .relaxed, db.commitCounts.relaxed != relaxedCommits,
                   db.rewrittenPendingChanges != rewritten {
                    relaxedLocalWriteMark.store(db.commitCounts.full, ordering: .relaxed)
                }
            }
            do throws(LayerSyncError) {
                // Set as the connection's mode only by a write (a read leaves it as it is).
                db.autocommitDurability = mode
                return .success(try body(db))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Runs `body` in one SQLite transaction under the store's lock.
    /// - Parameters:
    ///   - durability: How it commits: `nil` (default) for a write made by an API call
    ///     (``localWriteDurability``), `.relaxed` only for the engine's own writes, `.full` for
    ///     one that must be durable in every mode (see ``CommitDurability``).
    ///   - body: The work.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws (the transaction is rolled back), or `.databaseAccessFailed`.
    /// Every cached value is forgotten afterwards (committed or not); see ``localEdit(_:_:)``
    /// for the write path that keeps them.
    func transaction<T: Sendable>(_ durability: CommitDurability? = nil,
                                  _ body: (SQLiteDatabase) throws(LayerSyncError) -> T) throws(LayerSyncError) -> T {
        try withDatabase(durability) { db throws(LayerSyncError) in
            defer { invalidateCache() }
            // `db.autocommitDurability`: the mode withDatabase just chose (`durability` or the local one).
            return try db.transaction(db.autocommitDurability) { () throws(LayerSyncError) in try body(db) }
        }
    }

    /// Runs a local edit in one transaction that changes only `records`, `pending_changes` and
    /// uncached `meta` keys (`since`, `last_sync_time`; not `downloaded`, `content_version`),
    /// never `attachments`; the cached pending-change count is adjusted by the `pendingDelta`
    /// it returns. (The sync cycle's store work runs this way too, so that it keeps the cache.)
    /// - Parameters:
    ///   - durability: How it commits: `nil` (default) for a write made by an API call
    ///     (``localWriteDurability``), `.relaxed` only for the engine's own writes, `.full` for
    ///     one that must be durable in every mode (see ``CommitDurability``).
    ///   - body: The work; returns its result and how many rows it added to (or, negative,
    ///     removed from) `pending_changes`.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws (the transaction is rolled back, the cache stays valid).
    func localEdit<T: Sendable>(_ durability: CommitDurability? = nil, freezing: Bool = false,
                                _ body: (SQLiteDatabase) throws(LayerSyncError) -> (T, pendingDelta: Int)) throws(LayerSyncError) -> T {
        try withDatabase(durability) { db throws(LayerSyncError) in
            let mode = freezeDurability(db, freezing: freezing), changesBefore = db.totalChanges
            let (result, delta) = try db.transaction(mode) { () throws(LayerSyncError) in try body(db) }
            if freezing, mode == .full, db.totalChanges == changesBefore {
                // That FULL commit changed no row, so it wrote and synced nothing: the relaxed
                // rewrite is still not durable, and the next freeze must fsync again.
                relaxedLocalWriteMark.store(db.commitCounts.full, ordering: .relaxed)
            }
            cache.withLock { cache in cache.pendingChanges = cache.pendingChanges.map { $0 + delta } }
            return result
        }
    }

    /// Forgets every cached value (call under the `database` lock after writing outside
    /// ``transaction(_:_:)``/``localEdit(_:_:)``).
    func invalidateCache() {
        cache.withLock { $0 = Cache() }
    }

    /// A cached value, computed from the database (under its lock) when unknown.
    private func cached<T: Sendable>(_ key: WritableKeyPath<Cache, T?>,
                                     _ load: (SQLiteDatabase) throws(LayerSyncError) -> T) throws(LayerSyncError) -> T {
        try withDatabase { db throws(LayerSyncError) in
            if let value = cache.withLock({ $0[keyPath: key] }) { return value }
            let value = try load(db)
            cache.withLock { $0[keyPath: key] = value }
            return value
        }
    }

    // MARK: Meta

    /// Reads a `meta` value.
    static func meta(_ db: SQLiteDatabase, _ key: String) throws(LayerSyncError) -> String? {
        try db.query("SELECT value FROM meta WHERE key = ?", [.text(key)]).first?.first?.text
    }

    /// Writes (or with `nil` removes) a `meta` value.
    static func setMeta(_ db: SQLiteDatabase, _ key: String, _ value: String?) throws(LayerSyncError) {
        if let value {
            try db.query("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                         [.text(key), .text(value)])
        } else {
            try db.query("DELETE FROM meta WHERE key = ?", [.text(key)])
        }
    }

    /// Reads a `meta` value.
    /// - Parameter key: The key.
    /// - Returns: The value, or `nil`.
    /// - Throws: `.databaseAccessFailed`.
    package func meta(_ key: String) throws(LayerSyncError) -> String? {
        try withDatabase { db throws(LayerSyncError) in try Self.meta(db, key) }
    }

    /// Writes a `meta` value.
    /// - Parameters:
    ///   - key: The key.
    ///   - value: The value, or `nil` to remove it.
    ///   - durability: `nil` (default) for a value set for an API call (``localWriteDurability``),
    ///     or `.relaxed` for a value the engine keeps for itself.
    /// - Throws: `.databaseAccessFailed`.
    package func setMeta(_ key: String, _ value: String?, durability: CommitDurability? = nil) throws(LayerSyncError) {
        try withDatabase(durability) { db throws(LayerSyncError) in
            defer { invalidateCache() }
            try Self.setMeta(db, key, value)
        }
    }

    /// The layer epoch the store last synced against, `nil` before the first download.
    package func epoch() throws(LayerSyncError) -> String? { try meta("epoch") }

    /// The last server revision whose changes are applied locally (0 before download).
    package func since() throws(LayerSyncError) -> Int64 { Int64(try meta("since") ?? "0") ?? 0 }

    /// Whether the snapshot has been downloaded into the store.
    package func isDownloaded() throws(LayerSyncError) -> Bool {
        try cached(\.downloaded) { db throws(LayerSyncError) in try Self.meta(db, "downloaded") == "1" }
    }

    /// The content version of the records (meta `content_version`), `nil` when absent (current).
    func contentVersion() throws(LayerSyncError) -> Int? {
        try cached(\.contentVersion) { db throws(LayerSyncError) in try Self.meta(db, "content_version").flatMap { Int($0) } }
    }

    /// The host's override of the default group (Instant's `overrideDefaultGroup`), meta
    /// `default_group_override`: `nil` when none (the JWT's `default_group` applies). Cached:
    /// every create reads it (``setDefaultGroupOverride(_:)`` writes it through ``setMeta(_:_:durability:)``,
    /// which forgets the cache).
    /// - Throws: `.databaseAccessFailed`.
    package func defaultGroupOverride() throws(LayerSyncError) -> String? {
        try cached(\.defaultGroupOverride) { db throws(LayerSyncError) in try Self.meta(db, "default_group_override") }
    }

    /// Number of queued local changes plus attachments waiting for upload (the layer is
    /// dirty while this is above 0).
    /// - Returns: The count.
    /// - Throws: `.databaseAccessFailed`.
    package func pendingCount() throws(LayerSyncError) -> Int {
        let changes = try cached(\.pendingChanges) { db throws(LayerSyncError) in
            Int(try db.query("SELECT count(*) FROM pending_changes").first?.first?.integer ?? 0)
        }
        let attachments = try cached(\.pendingAttachments) { db throws(LayerSyncError) in
            Int(try db.query("SELECT count(*) FROM attachments WHERE uploaded = 0").first?.first?.integer ?? 0)
        }
        return changes + attachments
    }

    /// ``pendingCount()`` from inside a ``localEdit(_:_:)`` body that has so far changed
    /// `pending_changes` by `delta` rows (what it will return as its `pendingDelta`).
    /// - Parameters:
    ///   - db: The connection the body was given.
    ///   - delta: The body's change to `pending_changes` so far.
    /// - Returns: The count as it stands inside the transaction.
    /// - Throws: `.databaseAccessFailed`.
    func pendingCount(_ db: SQLiteDatabase, delta: Int) throws(LayerSyncError) -> Int {
        let cached = cache.withLock { ($0.pendingChanges, $0.pendingAttachments) }
        // A cached count predates the body; a counted one already includes its changes.
        var changes = cached.0.map { $0 + delta } ?? 0
        if cached.0 == nil {
            changes = Int(try db.query("SELECT count(*) FROM pending_changes").first?.first?.integer ?? 0)
        }
        var attachments = cached.1 ?? 0
        if cached.1 == nil {
            attachments = Int(try db.query("SELECT count(*) FROM attachments WHERE uploaded = 0").first?.first?.integer ?? 0)
        }
        return changes + attachments
    }

    /// The stable id of this local store, sent as `client_id`.
    package func clientID() throws(LayerSyncError) -> String { try meta("client_id") ?? "" }

    /// Raises `since` to `revision` (never lowers it).
    /// - Parameter revision: The new revision.
    /// - Throws: `.databaseAccessFailed`.
    func advanceSince(to revision: Int64) throws(LayerSyncError) {
        try withDatabase { db throws(LayerSyncError) in
            defer { invalidateCache() }
            try Self.advanceSince(db, to: revision)
        }
    }

    static func advanceSince(_ db: SQLiteDatabase, to revision: Int64) throws(LayerSyncError) {
        let current = Int64(try meta(db, "since") ?? "0") ?? 0
        if revision > current { try setMeta(db, "since", String(revision)) }
    }
}
