import Foundation
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

/// The record schema over the cases both sides share (api/record-schema-cases.json; the
/// server's test_record_schema.py reads the same file and expects the same messages).
@Suite struct RecordSchemaTests {
    struct Case {
        var name: String
        var record: String
        var field: String?
        var message: String?
    }

    static func cases() throws -> (valid: [Case], invalid: [Case]) {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("api/record-schema-cases.json").path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let root = try JSONValue.parse(text)
        func list(_ key: String) throws -> [Case] {
            try #require(root[key]?.arrayValue).map { entry in
                Case(name: entry["name"]?.stringValue ?? "?", record: try #require(entry["record"]).jsonText,
                     field: entry["field"]?.stringValue, message: entry["message"]?.stringValue)
            }
        }
        return (try list("valid"), try list("invalid"))
    }

    @Test func theSharedCasesHaveBothKinds() throws {
        let (valid, invalid) = try Self.cases()
        #expect(valid.count >= 10 && invalid.count >= 20)
    }

    @Test func validRecordsPassAsTheyAre() throws {
        for entry in try Self.cases().valid {
            do {
                let object = try DocumentDescriptor.recordObject(entry.record)
                #expect(JSONValue.object(object).jsonText == entry.record, "\(entry.name): changed")
            } catch {
                Issue.record("\(entry.name): refused: \(error.message)")
            }
        }
    }

    @Test func invalidRecordsAreRefusedNamingTheField() throws {
        for entry in try Self.cases().invalid {
            do {
                _ = try DocumentDescriptor.recordObject(entry.record)
                Issue.record("\(entry.name): accepted")
            } catch {
                #expect(error.code == .invalidJSONStructure, "\(entry.name)")
                #expect(error.message == entry.message, "\(entry.name)")
                #expect(error.message.contains("\"\(entry.field ?? "")\""), "\(entry.name): field not named")
            }
        }
    }

    @Test func customDataKeepsItsOwnErrorCode() {
        let record = #"{"type":"pspdfkit/note","pageIndex":"zero","customData":3}"#
        #expect(throws: LayerSyncError.self) { try DocumentDescriptor.recordObject(record) }
        do { _ = try DocumentDescriptor.recordObject(record) } catch { #expect(error.code == .invalidCustomData) }
    }

    @Test func everyGeneratedTableEntryPointsIntoTheNodes() {
        for (type, versions) in RecordSchema.records {
            for (_, index) in versions { #expect(RecordSchema.nodes.indices.contains(index), "\(type)") }
        }
        for node in RecordSchema.nodes {
            for child in node.properties.map(\.1) + node.anyOf + [node.items].compactMap({ $0 }) {
                #expect(RecordSchema.nodes.indices.contains(child))
            }
        }
    }
}
