import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

@Suite struct ULIDTests {
    @Test func encodesTheSpecExampleTimestamp() {
        // https://github.com/ulid/spec: 1469918176385 ms → "01ARYZ6S41"
        let id = ULID.encode(milliseconds: 1_469_918_176_385, randomHigh: 0, randomLow: 0)
        #expect(id == "01ARYZ6S410000000000000000")
        #expect(ULID.encode(milliseconds: 0xFFFF_FFFF_FFFF, randomHigh: .max, randomLow: .max) == "7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
        #expect(ULID.milliseconds(of: id) == 1_469_918_176_385)
    }

    @Test func generatesValidStrictlyIncreasingIDs() {
        var previous = ""
        for _ in 0..<20_000 {
            let id = ULID.generate()
            #expect(id.utf8.count == 26)
            #expect(ULID.isValid(id))
            #expect(id > previous)
            previous = id
        }
    }

    @Test func incrementsWithinTheSameMillisecond() {
        let a = ULID.generate(milliseconds: 4_000_000_000_000)
        let b = ULID.generate(milliseconds: 4_000_000_000_000)
        let c = ULID.generate(milliseconds: 3_999_999_999_999)  // clock stepped back: still increasing
        #expect(a < b && b < c)
        #expect(a.prefix(10) == b.prefix(10))
    }

    @Test func rejectsMalformedIDs() {
        #expect(!ULID.isValid("01ARYZ6S41000000000000000"))   // 25
        #expect(!ULID.isValid("01ARYZ6S41000000000000000I"))  // I not in alphabet
        #expect(!ULID.isValid("81ARYZ6S410000000000000000"))  // overflows 128 bits
    }
}
