/// The one error type of the engine: a code from ``ErrorCode`` plus context.
///
/// Mirrors the C `layersync_error` struct: which domain the detail comes from is
/// told by which optional field is set (SQLite extended code, HTTP status).
public struct LayerSyncError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, as a stable code.
    public var code: ErrorCode
    /// A human-readable explanation (English, not localised, not stable).
    public var message: String
    /// The SQLite extended result code when `code` is `.databaseAccessFailed`.
    public var sqliteExtendedCode: Int32?
    /// The HTTP status of the server's answer, when there was one.
    public var httpStatus: Int?
    /// The document the error concerns, when there is one.
    public var documentID: String?
    /// The record the error concerns, when there is one.
    public var recordID: String?
    /// The attachment the error concerns, when there is one.
    public var attachmentID: String?

    /// Creates an error.
    /// - Parameters:
    ///   - code: The error code.
    ///   - message: A human-readable explanation.
    ///   - sqliteExtendedCode: SQLite's extended result code, if SQLite failed.
    ///   - httpStatus: The HTTP status, if the server answered.
    ///   - documentID: The document concerned.
    ///   - recordID: The record concerned.
    ///   - attachmentID: The attachment concerned.
    public init(
        _ code: ErrorCode, _ message: String, sqliteExtendedCode: Int32? = nil, httpStatus: Int? = nil,
        documentID: String? = nil, recordID: String? = nil, attachmentID: String? = nil
    ) {
        self.code = code
        self.message = message
        self.sqliteExtendedCode = sqliteExtendedCode
        self.httpStatus = httpStatus
        self.documentID = documentID
        self.recordID = recordID
        self.attachmentID = attachmentID
    }

    public var description: String {
        var text = "\(code): \(message)"
        if let httpStatus { text += " [HTTP \(httpStatus)]" }
        if let sqliteExtendedCode { text += " [SQLite \(sqliteExtendedCode)]" }
        return text
    }

    /// A copy with `documentID` set (used when an engine error surfaces through a document).
    package func with(documentID: String) -> LayerSyncError {
        var copy = self
        copy.documentID = documentID
        return copy
    }
}
