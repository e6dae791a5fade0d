import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

/// `JSONValue.isValid(bytes:)` accepts exactly what `JSONValue.parse(bytes:)` accepts.
struct JSONValidatorTests {
    static let seeds: [String] = [
        #"{"v":2,"type":"pspdfkit/note","bbox":[1,2.5e3,-0.1,4],"text":{"format":"plain","value":"Looks good 👍 \"q\" \\ \/ \u00e9 \ud83d\ude00"},"n":null,"t":true,"f":false}"#,
        #"[]"#, #"{}"#, #"  [ 1 , { "a" : [ ] } ]  "#, #""x""#, #"0"#, #"-0.0E+1"#,
        "{\"k\":\"\u{05D0}\u{0645}\u{202E}\u{FEFF}\"}",
    ]

    func parses(_ bytes: [UInt8]) -> Bool { (try? JSONValue.parse(bytes: bytes)) != nil }
    func valid(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBufferPointer { JSONValue.isValid(bytes: $0) } }

    @Test func agreesWithTheParserOnSeedsAndTheirMutations() {
        var random = SplitMix(seed: 0x5EED)
        let alphabet: [UInt8] = Array(#"{}[]",:\/ubfnrt0123456789-+.eEaxtrue false null"#.utf8) + [0x00, 0x1F, 0x7F, 0x80, 0xBF, 0xC0, 0xC2, 0xE0, 0xED, 0xA0, 0xF0, 0xF4, 0x90, 0xF5, 0xFF]
        var checked = 0
        for seed in Self.seeds {
            let base = Array(seed.utf8)
            #expect(valid(base) == parses(base), "seed \(seed)")
            for _ in 0..<4000 {
                var bytes = base
                for _ in 0..<(1 + Int(random.next() % 3)) {
                    let position = bytes.isEmpty ? 0 : Int(random.next() % UInt64(bytes.count))
                    switch random.next() % 3 {
                    case 0 where !bytes.isEmpty: bytes.remove(at: position)
                    case 1: bytes.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: position)
                    default: if !bytes.isEmpty { bytes[position] = alphabet[Int(random.next() % UInt64(alphabet.count))] }
                    }
                }
                #expect(valid(bytes) == parses(bytes), "bytes \(bytes)")
                checked += 1
            }
        }
        let deep = Array(String(repeating: "[", count: 600).utf8) + Array(String(repeating: "]", count: 600).utf8)
        #expect(valid(deep) == parses(deep))
        #expect(checked > 0)
    }
}
