import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

/// The one place the tests turn a record handed out (create, update, get, list, ...) into its
/// content as the server stores it: without the keys the engine adds (its ownership
/// `createdBy`, `updatedBy`, `group`, on every record; the permission flags under a
/// `collaboration_permissions` claim; ``DocumentDescriptor/ownershipKeys``,
/// ``DocumentDescriptor/permissionFlagKeys``). Tests that compare records with the server's
/// content go through it; the ownership itself is checked by the collaboration tests.
extension TestServer {
    /// The keys a record handed out carries besides its content.
    static let handOutKeys = DocumentDescriptor.ownershipKeys + DocumentDescriptor.permissionFlagKeys

    /// `record` without ``handOutKeys`` (anything but an object is returned as it is).
    static func recordContent(_ record: JSONValue) -> JSONValue {
        guard case .object(var object) = record else { return record }
        for key in handOutKeys { object[key] = nil }
        return .object(object)
    }

    /// ``recordContent(_:)`` of a record's JSON text, as compact JSON text (the text of a
    /// record's content as the engine stores it: members in their order, numbers as written).
    /// - Throws: When `text` does not parse.
    static func recordContent(_ text: String) throws -> String {
        recordContent(try JSONValue.parse(text)).jsonText
    }
}

/// The document's live records by id, each as ``TestServer/recordContent(_:)-(JSONValue)``.
func localRecords(_ document: DocumentDescriptor) throws -> [String: JSONValue] {
    var result: [String: JSONValue] = [:]
    for record in try JSONValue.parse(try document.listAnnotations(filterJSON: nil)).arrayValue ?? [] {
        if let id = record["id"]?.stringValue { result[id] = TestServer.recordContent(record) }
    }
    return result
}
