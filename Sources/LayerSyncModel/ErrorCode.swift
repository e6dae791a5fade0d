/// A LayerSync error code (docs/architecture.md §5).
///
/// Codes below 1000 keep the numbers of PSPDFKit Instant's `InstantError` so that
/// people who know Instant recognise them; LayerSync's own codes start at 1000.
/// The raw value is what the C ABI returns (`layersync_error.code`).
public struct ErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The numeric code, as exposed through the C ABI.
    public let rawValue: Int32

    /// Creates a code from its numeric value (unknown values are kept as they are).
    /// - Parameter rawValue: The numeric code.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// Anything that has no better code.
    public static let unknown = ErrorCode(rawValue: 1)
    /// The server or the local store does not support the requested feature.
    public static let featureUnsupported = ErrorCode(rawValue: 2)
    /// The server does not know the document (HTTP 404).
    public static let invalidDocument = ErrorCode(rawValue: 3)
    /// The server rejected the JWT (HTTP 401/403).
    public static let accessDenied = ErrorCode(rawValue: 4)
    /// `download()` was called on a document that is already downloaded.
    public static let alreadyDownloaded = ErrorCode(rawValue: 5)
    /// SQLite failed; `LayerSyncError.sqliteExtendedCode` has the extended result code.
    public static let databaseAccessFailed = ErrorCode(rawValue: 6)
    /// A file or directory could not be created or written.
    public static let couldNotWriteToDisk = ErrorCode(rawValue: 7)
    /// The server URL is malformed, or plain `http://` to a non-loopback host was not allowed.
    public static let invalidURL = ErrorCode(rawValue: 8)
    /// The document is not managed by this client.
    public static let unmanagedDocument = ErrorCode(rawValue: 10)
    /// No live record has the given id.
    public static let noSuchAnnotation = ErrorCode(rawValue: 11)
    /// The annotation is not managed by the sync engine.
    public static let unmanagedAnnotation = ErrorCode(rawValue: 12)
    /// A cached file could not be read.
    public static let couldNotReadFromDiskCache = ErrorCode(rawValue: 13)
    /// Cached files could not be removed.
    public static let couldNotRemoveDiskCacheEntries = ErrorCode(rawValue: 14)
    /// The server could not be reached, or answered 5xx; the work is retried later.
    public static let requestFailed = ErrorCode(rawValue: 16)
    /// The server's answer did not follow the protocol.
    public static let invalidServerData = ErrorCode(rawValue: 17)
    /// The server rejected the request as malformed (HTTP 400).
    public static let invalidRequest = ErrorCode(rawValue: 18)
    /// A single change is larger than the server's `max_request_bytes` (HTTP 413).
    public static let payloadLimitExceeded = ErrorCode(rawValue: 19)
    /// The server needs a newer protocol than this client speaks (HTTP 426).
    public static let oldClient = ErrorCode(rawValue: 21)
    /// The server's newest protocol is older than this client's.
    public static let oldServer = ErrorCode(rawValue: 22)
    /// The JWT is not shaped like a LayerSync token (offline check).
    public static let invalidJWT = ErrorCode(rawValue: 32)
    /// The JWT's `user_id` differs from the user pinned to the local layer.
    public static let userIDMismatch = ErrorCode(rawValue: 33)
    /// The attachment's data has not been downloaded.
    public static let attachmentNotLoaded = ErrorCode(rawValue: 40)
    /// No attachment has the given id.
    public static let noSuchAttachment = ErrorCode(rawValue: 41)
    /// The attachment could not be stored.
    public static let couldNotCreateAttachment = ErrorCode(rawValue: 42)
    /// A reauthentication is already running for the document.
    public static let alreadyAuthenticating = ErrorCode(rawValue: 66)
    /// The local content needs a migration before use.
    public static let contentMigrationNeeded = ErrorCode(rawValue: 96)
    /// A content migration is running.
    public static let performingContentMigration = ErrorCode(rawValue: 97)
    /// The JSON parsed but is not a valid record (not an object, no `type`, bad `id`).
    public static let invalidJSONStructure = ErrorCode(rawValue: 112)
    /// Custom data of a record is invalid.
    public static let invalidCustomData = ErrorCode(rawValue: 113)
    /// A caller-supplied argument is invalid: unparsable JSON text, bad UTF-8, out-of-range value.
    public static let invalidArgument = ErrorCode(rawValue: 1000)
    /// The operation was cancelled by the caller or by shutdown.
    public static let cancelled = ErrorCode(rawValue: 1001)
    /// Another process holds the layer's local store.
    public static let storageLocked = ErrorCode(rawValue: 1002)
    /// The server's layer epoch changed (layer recreated or restored).
    public static let serverReset = ErrorCode(rawValue: 1003)
    /// A local change was rejected in favour of the server's version.
    public static let conflict = ErrorCode(rawValue: 1004)
    /// The document must be downloaded first.
    public static let notDownloaded = ErrorCode(rawValue: 1005)
    /// The call is not allowed in the object's current state.
    public static let invalidState = ErrorCode(rawValue: 1006)
    /// The JWT is valid, but its `collaboration_permissions` do not allow this on this record
    /// (docs/protocol.md "Collaboration permissions"): refused at the API, rejected `forbidden`
    /// by the server, or a rollback/restore answered 403 `forbidden`. Not an authentication failure.
    public static let forbidden = ErrorCode(rawValue: 1007)

    /// Every code with its C enum suffix (`LAYERSYNC_ERROR_<name>`), in numeric order.
    public static let allNamed: [(code: ErrorCode, name: String)] = [
        (.unknown, "UNKNOWN"), (.featureUnsupported, "FEATURE_UNSUPPORTED"),
        (.invalidDocument, "INVALID_DOCUMENT"), (.accessDenied, "ACCESS_DENIED"),
        (.alreadyDownloaded, "ALREADY_DOWNLOADED"), (.databaseAccessFailed, "DATABASE_ACCESS_FAILED"),
        (.couldNotWriteToDisk, "COULD_NOT_WRITE_TO_DISK"), (.invalidURL, "INVALID_URL"),
        (.unmanagedDocument, "UNMANAGED_DOCUMENT"), (.noSuchAnnotation, "NO_SUCH_ANNOTATION"),
        (.unmanagedAnnotation, "UNMANAGED_ANNOTATION"),
        (.couldNotReadFromDiskCache, "COULD_NOT_READ_FROM_DISK_CACHE"),
        (.couldNotRemoveDiskCacheEntries, "COULD_NOT_REMOVE_DISK_CACHE_ENTRIES"),
        (.requestFailed, "REQUEST_FAILED"), (.invalidServerData, "INVALID_SERVER_DATA"),
        (.invalidRequest, "INVALID_REQUEST"), (.payloadLimitExceeded, "PAYLOAD_LIMIT_EXCEEDED"),
        (.oldClient, "OLD_CLIENT"), (.oldServer, "OLD_SERVER"), (.invalidJWT, "INVALID_JWT"),
        (.userIDMismatch, "USER_ID_MISMATCH"), (.attachmentNotLoaded, "ATTACHMENT_NOT_LOADED"),
        (.noSuchAttachment, "NO_SUCH_ATTACHMENT"), (.couldNotCreateAttachment, "COULD_NOT_CREATE_ATTACHMENT"),
        (.alreadyAuthenticating, "ALREADY_AUTHENTICATING"),
        (.contentMigrationNeeded, "CONTENT_MIGRATION_NEEDED"),
        (.performingContentMigration, "PERFORMING_CONTENT_MIGRATION"),
        (.invalidJSONStructure, "INVALID_JSON_STRUCTURE"), (.invalidCustomData, "INVALID_CUSTOM_DATA"),
        (.invalidArgument, "INVALID_ARGUMENT"), (.cancelled, "CANCELLED"),
        (.storageLocked, "STORAGE_LOCKED"), (.serverReset, "SERVER_RESET"), (.conflict, "CONFLICT"),
        (.notDownloaded, "NOT_DOWNLOADED"), (.invalidState, "INVALID_STATE"),
        (.forbidden, "FORBIDDEN"),
    ]

    /// The code's C enum suffix, e.g. `"REQUEST_FAILED"`, or `nil` for an unknown number.
    public var name: String? { Self.allNamed.first { $0.code == self }?.name }

    public var description: String { name.map { "\($0)(\(rawValue))" } ?? "\(rawValue)" }
}
