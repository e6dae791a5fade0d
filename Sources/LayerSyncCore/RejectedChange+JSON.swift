extension RejectedChange {
    /// `[{"id", "reason", "local": record-or-null, "server": record-or-null}]`: the payload
    /// of the C callback `did_reject_changes`. A version that is not valid JSON (it always
    /// is: both come from the store) is passed as null rather than breaking the array.
    public static func jsonText(_ rejected: [RejectedChange]) -> String {
        JSONValue.array(rejected.map { change in
            .object(JSONObject([
                ("id", .string(change.recordID)),
                ("reason", .string(change.reason)),
                ("local", change.localJSON.flatMap { try? JSONValue.parse($0) } ?? .null),
                ("server", change.serverJSON.flatMap { try? JSONValue.parse($0) } ?? .null),
            ]))
        }).jsonText
    }
}
