extension RecordChanges {
    /// `{"created": [ids], "updated": [ids], "deleted": [ids]}`: the payload of the C
    /// callback `did_receive_changes`.
    public var jsonText: String {
        JSONValue.object(JSONObject([
            ("created", .array(created.map(JSONValue.string))),
            ("updated", .array(updated.map(JSONValue.string))),
            ("deleted", .array(deleted.map(JSONValue.string))),
        ])).jsonText
    }
}
