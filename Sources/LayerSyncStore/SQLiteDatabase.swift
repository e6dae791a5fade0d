import CSQLite
import LayerSyncModel

/// A thin owner of one `sqlite3` connection. Not thread-safe by itself: ``LayerStore``
/// uses it only inside its mutex (the connection is opened with `SQLITE_OPEN_NOMUTEX`).
final class SQLiteDatabase {
    /// One bindable SQL value.
    enum Value {
        case null
        case integer(Int64)
        case text(String)
        /// Part of a string (offsets of its UTF-8 bytes), bound as text without making a String of it.
        /// The range must lie within the string's UTF-8 bytes (a precondition: a wrong range is a
        /// bug, never a shorter text).
        case textBytes(String, Range<Int>)
    }

    private var handle: OpaquePointer?
    private var statements: [String: OpaquePointer] = [:]
    /// ``statements`` again, keyed by where the SQL text's bytes are: an SQL string literal
    /// keeps its address, so a hit costs an integer hash instead of hashing the whole text
    /// (the text is still compared, which for the same literal is an identity check).
    private var statementsByAddress: [UInt: (sql: String, statement: OpaquePointer)] = [:]
    /// The file path.
    let path: String
    /// The connection's `PRAGMA synchronous` as last set by ``setDurability(_:)``; `nil` until then.
    private(set) var durability: CommitDurability?
    /// How a write outside ``transaction(_:_:)`` commits (an autocommit statement): set by
    /// ``LayerStore/withDatabase(_:_:)`` for its body, applied (``setDurability(_:)``) only when
    /// such a statement writes, so that reads never switch the connection's mode.
    var autocommitDurability: CommitDurability = .full
    /// Write transactions committed so far, by the durability they committed with (counted by
    /// a commit hook, so autocommit statements count too). For tests, and for ``LayerStore`` to
    /// tell whether a FULL commit has followed a relaxed API write.
    private(set) var commitCounts = CommitCounts()
    /// Queued changes rewritten in place on this connection so far (``LayerStore``'s `enqueue`
    /// counts each coalescing): a relaxed API write that rewrote one makes the next freeze
    /// fsync (docs/durability.md).
    var rewrittenPendingChanges = 0

    /// Rows inserted, updated or deleted on this connection so far (`sqlite3_total_changes64`;
    /// counted when a statement completes).
    var totalChanges: Int64 { sqlite3_total_changes64(handle) }

    /// See ``commitCounts``.
    struct CommitCounts: Sendable, Equatable {
        var full = 0
        var relaxed = 0
        /// The durability of the last commit.
        var last: CommitDurability?
    }

    /// Opens (creating if needed) a database file.
    /// - Parameter path: The file path.
    /// - Throws: `.databaseAccessFailed` with SQLite's extended code.
    init(path: String) throws(LayerSyncError) {
        self.path = path
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        handle = db
        guard rc == SQLITE_OK, db != nil else {
            let code = db.map { sqlite3_extended_errcode($0) } ?? rc
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            handle = nil
            throw LayerSyncError(.databaseAccessFailed, "cannot open \(path): \(message)", sqliteExtendedCode: code)
        }
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, 5000)
        sqlite3_commit_hook(db, { context in
            guard let context else { return 0 }
            Unmanaged<SQLiteDatabase>.fromOpaque(context).takeUnretainedValue().noteCommit()
            return 0  // 0 = let the commit go ahead
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    private func noteCommit() {
        // `durability` nil: not set yet, SQLite's default (FULL), or unknown after a failed pragma.
        let mode = durability ?? .full
        if mode == .full { commitCounts.full += 1 } else { commitCounts.relaxed += 1 }
        commitCounts.last = mode
    }

    deinit {
        sqlite3_commit_hook(handle, nil, nil)
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close_v2(handle)
    }

    private func failure(_ rc: Int32, _ sql: String) -> LayerSyncError {
        let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "no connection"
        let code = handle.map { sqlite3_extended_errcode($0) } ?? rc
        return LayerSyncError(.databaseAccessFailed, "SQLite: \(message) (\(sql.prefix(60)))", sqliteExtendedCode: code)
    }

    /// Runs one or more statements without results.
    /// - Parameter sql: The SQL text.
    /// - Throws: `.databaseAccessFailed`.
    func execute(_ sql: String) throws(LayerSyncError) {
        let rc = sqlite3_exec(handle, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw failure(rc, sql) }
    }

    /// Runs a statement and collects its rows.
    /// - Parameters:
    ///   - sql: One SQL statement with `?` placeholders (prepared once and cached).
    ///   - bindings: Values for the placeholders, in order.
    /// - Returns: Rows of column values (`.null`, `.integer`, `.text`).
    /// - Throws: `.databaseAccessFailed`.
    @discardableResult
    func query(_ sql: String, _ bindings: [Value] = []) throws(LayerSyncError) -> [[Value]] {
        var rows: [[Value]] = []
        try forEachRow(sql, bindings) { row throws(LayerSyncError) in
            let columns = row.columnCount
            var values: [Value] = []
            values.reserveCapacity(Int(columns))
            for column in 0..<columns { values.append(row.value(column)) }
            rows.append(values)
            return true
        }
        return rows
    }

    /// One result row of ``forEachRow(_:_:_:)``, valid only inside the callback: columns
    /// are read on demand, so a row costs nothing for the columns it does not read.
    struct Row: ~Copyable {
        fileprivate let statement: OpaquePointer

        /// Number of columns.
        var columnCount: Int32 { sqlite3_column_count(statement) }

        /// Whether a column is NULL.
        func isNull(_ column: Int32) -> Bool { sqlite3_column_type(statement, column) == SQLITE_NULL }

        /// An integer column; `nil` for NULL and text.
        func integer(_ column: Int32) -> Int64? {
            sqlite3_column_type(statement, column) == SQLITE_INTEGER ? sqlite3_column_int64(statement, column) : nil
        }

        /// A text column; `nil` for NULL and integers.
        func text(_ column: Int32) -> String? {
            switch sqlite3_column_type(statement, column) {
            case SQLITE_NULL, SQLITE_INTEGER: return nil
            default: return withText(column) { String(decoding: $0, as: UTF8.self) }
            }
        }

        /// Calls `body` with a text column's UTF-8 bytes (no copy; valid only during the call);
        /// NULL and integers are treated as text the way SQLite converts them.
        func withText<T>(_ column: Int32, _ body: (UnsafeBufferPointer<UInt8>) -> T) -> T {
            let bytes = sqlite3_column_text(statement, column)  // before _bytes (SQLite's rule)
            let count = Int(sqlite3_column_bytes(statement, column))
            return body(UnsafeBufferPointer(start: bytes, count: bytes == nil ? 0 : count))
        }

        /// The column as a ``Value`` (what ``query(_:_:)`` returns).
        func value(_ column: Int32) -> Value {
            switch sqlite3_column_type(statement, column) {
            case SQLITE_NULL: return .null
            case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, column))
            default: return .text(text(column) ?? "")
            }
        }
    }

    /// Runs a statement and hands its rows to `body` one at a time, without collecting them.
    /// - Parameters:
    ///   - sql: One SQL statement with `?` placeholders (prepared once and cached).
    ///   - bindings: Values for the placeholders, in order.
    ///   - body: Called per row; returns `false` to stop early. It must not run this same
    ///     statement again (it may run others).
    /// - Throws: `.databaseAccessFailed`, or what `body` throws.
    func forEachRow(_ sql: String, _ bindings: [Value] = [],
                    _ body: (borrowing Row) throws(LayerSyncError) -> Bool) throws(LayerSyncError) {
        let statement = try prepared(sql)
        if autocommitDurability != durability, sqlite3_stmt_readonly(statement) == 0, sqlite3_get_autocommit(handle) != 0 {
            try setDurability(autocommitDurability)  // an autocommit write: it commits with this mode
        }
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        try bind(bindings, to: statement, sql: sql)
        let row = Row(statement: statement)
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw failure(rc, sql) }
            guard try body(row) else { break }
        }
    }

    private func bind(_ bindings: [Value], to statement: OpaquePointer, sql: String) throws(LayerSyncError) {
        for (offset, value) in bindings.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch value {
            case .null: rc = sqlite3_bind_null(statement, index)
            case .integer(let number): rc = sqlite3_bind_int64(statement, index, number)
            case .text(let text):
                // SQLITE_TRANSIENT: SQLite copies the bytes before returning.
                rc = sqlite3_bind_text(statement, index, text, -1, unsafeBitCast(-1, to: sqlite3_destructor_type.self))
            case .textBytes(let text, let range):
                var copy = text
                rc = copy.withUTF8 { bytes in
                    precondition(range.lowerBound >= 0 && range.upperBound <= bytes.count,
                                 "textBytes range \(range) outside the text's \(bytes.count) UTF-8 bytes")
                    let part = UnsafeBufferPointer(rebasing: bytes[range])
                    return part.withMemoryRebound(to: CChar.self) { chars in
                        // A NULL pointer would bind NULL, not an empty text.
                        guard let start = chars.baseAddress, !chars.isEmpty else { return sqlite3_bind_text(statement, index, "", 0, nil) }
                        return sqlite3_bind_text(statement, index, start, Int32(chars.count),
                                                 unsafeBitCast(-1, to: sqlite3_destructor_type.self))
                    }
                }
            }
            guard rc == SQLITE_OK else { throw failure(rc, sql) }
        }
    }

    /// Sets `PRAGMA synchronous` for the following commits (FULL or NORMAL), unless it already
    /// has that value (no statement then). Only outside a transaction (SQLite refuses a change
    /// of safety level inside one).
    /// - Parameter durability: The durability of the next commits.
    /// - Throws: `.databaseAccessFailed`.
    func setDurability(_ durability: CommitDurability) throws(LayerSyncError) {
        guard durability != self.durability else { return }
        self.durability = nil  // unknown if the pragma fails
        try execute(durability == .full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL")
        self.durability = durability
    }

    /// Runs `body` in a `BEGIN IMMEDIATE` transaction; commits if it returns, rolls back if it throws.
    /// - Parameters:
    ///   - durability: How the transaction commits (see ``CommitDurability``); the connection
    ///     keeps that mode afterwards.
    ///   - body: The work.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws, or `.databaseAccessFailed`.
    func transaction<T>(_ durability: CommitDurability = .full, _ body: () throws(LayerSyncError) -> T) throws(LayerSyncError) -> T {
        try setDurability(durability)
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Number of rows changed by the last statement.
    var changes: Int { Int(sqlite3_changes(handle)) }

    private func prepared(_ sql: String) throws(LayerSyncError) -> OpaquePointer {
        // Only a string whose bytes live outside it (not a small one, stored inline and copied
        // with it) has an address worth remembering.
        let address = sql.utf8.count > 15 ? sql.utf8.withContiguousStorageIfAvailable { UInt(bitPattern: $0.baseAddress) } ?? nil : nil
        if let address, let cached = statementsByAddress[address], cached.sql == sql { return cached.statement }
        let statement: OpaquePointer
        if let known = statements[sql] {
            statement = known
        } else {
            var made: OpaquePointer?
            let rc = sqlite3_prepare_v2(handle, sql, -1, &made, nil)
            guard rc == SQLITE_OK, let made else { throw failure(rc, sql) }
            statements[sql] = made
            statement = made
        }
        if let address {
            // SQL built at run time adds an address per call: start over now and then.
            if statementsByAddress.count >= 2 * statements.count + 64 { statementsByAddress.removeAll(keepingCapacity: true) }
            statementsByAddress[address] = (sql, statement)  // holding `sql` keeps its address from being reused
        }
        return statement
    }
}

extension SQLiteDatabase.Value {
    /// The text, or `nil` for NULL/integers.
    var text: String? {
        if case .text(let value) = self { return value }
        return nil
    }

    /// The integer, or `nil` for NULL/text.
    var integer: Int64? {
        if case .integer(let value) = self { return value }
        return nil
    }
}
