/// A local change that lost against the server (first writer wins), as reported by
/// `ClientEvent.didRejectChanges`. The engine has already adopted the server version.
public struct RejectedChange: Sendable {
    /// The record whose local change was rejected.
    public var recordID: String
    /// Why: the server's `reason` (`conflict`, `exists`, `not_found`, `invalid`),
    /// `payload_too_large` for a change over the server's limit, or
    /// `superseded` when a server change arrived before the local one was sent,
    /// `attachment_missing` for a queued attachment upload whose file vanished from the
    /// disk cache (``recordID`` is then the attachment id).
    public var reason: String
    /// The local version that lost (Instant JSON), or `nil` for a local delete.
    public var localJSON: String?
    /// The server version that won (Instant JSON), or `nil` if the record is deleted or
    /// absent on the server.
    public var serverJSON: String?

    /// The error code of the rejection: `.payloadLimitExceeded` for `payload_too_large`,
    /// `.noSuchAnnotation` for `not_found`, `.invalidJSONStructure` for `invalid`,
    /// `.couldNotReadFromDiskCache` for `attachment_missing`, and
    /// `.conflict` for `conflict`, `exists`, `superseded` (first writer wins).
    public var code: ErrorCode {
        switch reason {
        case "payload_too_large": .payloadLimitExceeded
        case "attachment_missing": .couldNotReadFromDiskCache
        case "not_found": .noSuchAnnotation
        case "invalid": .invalidJSONStructure
        default: .conflict
        }
    }

    /// Creates a rejection report.
    /// - Parameters:
    ///   - recordID: The record concerned.
    ///   - reason: Why the change lost.
    ///   - localJSON: The losing local version.
    ///   - serverJSON: The winning server version.
    package init(recordID: String, reason: String, localJSON: String?, serverJSON: String?) {
        self.recordID = recordID
        self.reason = reason
        self.localJSON = localJSON
        self.serverJSON = serverJSON
    }
}
