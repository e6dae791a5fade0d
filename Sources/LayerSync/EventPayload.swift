import LayerSyncCore
import LayerSyncModel

/// JSON payloads of the string callbacks (`did_receive_changes`, `did_reject_changes`),
/// in the shapes documented in api/layersync.toml.
enum EventPayload {
    /// `{"created": [ids], "updated": [ids], "deleted": [ids]}`
    static func json(_ changes: RecordChanges) -> String {
        changes.jsonText
    }

    /// `[{"id", "reason", "code", "local": record-or-null, "server": record-or-null}]`
    static func json(_ rejected: [RejectedChange]) -> String {
        RejectedChange.jsonText(rejected)
    }
}
