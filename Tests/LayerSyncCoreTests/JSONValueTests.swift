import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

@Suite struct JSONValueTests {
    @Test func roundTripsStringsByteExactAndKeepsKeyOrderAndNumberText() throws {
        let text = #"{"z":1,"a":"emoji 👩‍👩‍👧 RTL שלום مرحبا, NFD e\u0301 vs é","m":[1.50,-0,2e10,1E-3,true,null],"q":"\"\\\/\b\f\n\r\t\u0001"}"#
        let value = try JSONValue.parse(text)
        #expect(value.objectValue?.keys == ["z", "a", "m", "q"])
        let written = value.jsonText
        #expect(written.contains("👩‍👩‍👧 RTL שלום مرحبا"))
        #expect(written.contains("[1.50,-0,2e10,1E-3,true,null]"))
        let decomposed = Array("e\u{0301}".utf8)
        #expect(value["a"]?.stringValue.map { Array($0.utf8) }.map { $0.count > decomposed.count } == true)
        // Writing and re-parsing is a fixed point, and string bytes are unchanged.
        #expect(try JSONValue.parse(written) == value)
        #expect(try JSONValue.parse(written).jsonText == written)
        #expect(Array(value["a"]!.stringValue!.utf8) == Array("emoji 👩‍👩‍👧 RTL שלום مرحبا, NFD e\u{0301} vs é".utf8))
    }

    @Test func decodesSurrogatePairs() throws {
        #expect(try JSONValue.parse(#""\ud83d\ude00""#) == .string("😀"))
    }

    @Test(arguments: ["", "{", "[1,]", "{\"a\" 1}", "01", "1.", "tru", "\"\\ud800\"", "\"a\u{01}\"", "{} x", "NaN"])
    func rejectsInvalidText(_ text: String) {
        do {
            _ = try JSONValue.parse(text)
            Issue.record("parsed invalid JSON \(text)")
        } catch {
            #expect(error.code == .invalidArgument)
        }
    }

    @Test func rejectsInvalidUTF8Bytes() {
        #expect(throws: LayerSyncError.self) { try JSONValue.parse(bytes: [0x22, 0xC3, 0x28, 0x22]) }
    }
}
