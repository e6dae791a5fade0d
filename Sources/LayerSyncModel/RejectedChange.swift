/// A local change that lost against the server (first writer wins), as reported by
/// `ClientEvent.didRejectChanges`. The engine has already adopted the server version.
///
/// Each one is a *report* stored in the layer store in the same transaction that adopted the
/// server version (table `rejected_changes`, docs/durability.md), under a stable
/// ``reportID``: it is delivered at least once (again after a crash before delivery) and
/// listed until acknowledged (``DocumentDescriptor/acknowledgeRejectedChanges(ids:)``).
public struct RejectedChange: Sendable, Equatable {
    /// The report's stable id (a ULID): the same in every delivery and in the list, so a host
    /// drops a duplicate delivery by it. Empty for a value not stored as a report.
    public var reportID: String
    /// The change id of the local change that lost (the newest queued one of the record), or
    /// `nil` when none applies (an attachment upload).
    public var changeID: String?
    /// The record whose local change was rejected.
    public var recordID: String
    /// Why: the server's `reason` (`conflict`, `exists`, `not_found`, `invalid`, `forbidden`:
    /// the token's collaboration permissions do not allow the change, or, after a
    /// reauthentication, the record left the token's view while a local change of it was queued),
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
    /// `.couldNotReadFromDiskCache` for `attachment_missing`, `.forbidden` for `forbidden`, and
    /// `.conflict` for `conflict`, `exists`, `superseded` (first writer wins).
    public var code: ErrorCode {
        switch reason {
        case "payload_too_large": .payloadLimitExceeded
        case "attachment_missing": .couldNotReadFromDiskCache
        case "not_found": .noSuchAnnotation
        case "invalid": .invalidJSONStructure
        case "forbidden": .forbidden
        default: .conflict
        }
    }

    /// Creates a rejection report.
    /// - Parameters:
    ///   - reportID: The stored report's id (empty for none).
    ///   - changeID: The change id of the losing change, if any.
    ///   - recordID: The record concerned.
    ///   - reason: Why the change lost.
    ///   - localJSON: The losing local version.
    ///   - serverJSON: The winning server version.
    package init(reportID: String = "", changeID: String? = nil, recordID: String, reason: String, localJSON: String?,
                 serverJSON: String?) {
        self.reportID = reportID
        self.changeID = changeID
        self.recordID = recordID
        self.reason = reason
        self.localJSON = localJSON
        self.serverJSON = serverJSON
    }
}
