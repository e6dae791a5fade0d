extension RejectedChange {
    /// `[{"report_id", "change_id", "id", "reason", "code", "local": record-or-null,
    /// "server": record-or-null}]` (`code`: the numeric ``ErrorCode``, see
    /// ``RejectedChange/code``; `change_id` null when none applies): the payload of the C
    /// callback `did_reject_changes`. A version that is not valid JSON (it always is: both
    /// come from the store) is passed as null rather than breaking the array.
    public static func jsonText(_ rejected: [RejectedChange]) -> String {
        JSONValue.array(rejected.map { $0.jsonObject() }).jsonText
    }

    /// The report as a JSON object (the elements of ``jsonText(_:)``), with `extra` fields
    /// appended (the list of stored reports adds `delivered`).
    package func jsonObject(_ extra: [(String, JSONValue)] = []) -> JSONValue {
        .object(JSONObject([
            ("report_id", .string(reportID)),
            ("change_id", changeID.map { .string($0) } ?? .null),
            ("id", .string(recordID)),
            ("reason", .string(reason)),
            ("code", .integer(Int64(code.rawValue))),
            ("local", localJSON.flatMap { try? JSONValue.parse($0) } ?? .null),
            ("server", serverJSON.flatMap { try? JSONValue.parse($0) } ?? .null),
        ] + extra))
    }
}
