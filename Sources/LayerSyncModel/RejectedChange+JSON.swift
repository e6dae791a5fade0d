extension RejectedChange {
    /// `[{"id", "reason", "code", "local": record-or-null, "server": record-or-null}]`
    /// (`code`: the numeric ``ErrorCode``, see ``RejectedChange/code``): the payload
    /// of the C callback `did_reject_changes`. A version that is not valid JSON (it always
    /// is: both come from the store) is passed as null rather than breaking the array.
    public static func jsonText(_ rejected: [RejectedChange]) -> String {
        JSONValue.array(rejected.map { change in
            .object(JSONObject([
                ("id", .string(change.recordID)),
                ("reason", .string(change.reason)),
                ("code", .integer(Int64(change.code.rawValue))),
                ("local", change.localJSON.flatMap { try? JSONValue.parse($0) } ?? .null),
                ("server", change.serverJSON.flatMap { try? JSONValue.parse($0) } ?? .null),
            ]))
        }).jsonText
    }
}
