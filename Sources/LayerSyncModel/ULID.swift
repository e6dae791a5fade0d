import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Universally Unique Lexicographically Sortable Identifiers (https://github.com/ulid/spec):
/// 48-bit millisecond timestamp + 80 random bits, written as 26 Crockford base32 characters.
///
/// Ids from one process are strictly increasing: within one millisecond (or if the clock
/// steps back) the random part of the previous id is incremented instead of redrawn.
/// Record ids, change ids and client ids are ULIDs.
package enum ULID {
    /// Crockford's base32 alphabet (no I, L, O, U).
    static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)

    private struct State {
        var lastMilliseconds: UInt64 = 0
        var lastRandomHigh: UInt16 = 0
        var lastRandomLow: UInt64 = 0
    }

    private static let state = Mutex(State())

    /// A new ULID, later than every ULID this process generated before.
    /// - Returns: 26 uppercase Crockford base32 characters.
    package static func generate() -> String {
        generate(milliseconds: currentMilliseconds())
    }

    /// A new ULID for a given time, for tests; still monotonic with earlier ids.
    /// - Parameter milliseconds: Milliseconds since the Unix epoch (48 bits used).
    /// - Returns: 26 uppercase Crockford base32 characters.
    static func generate(milliseconds: UInt64) -> String {
        let (time, high, low) = state.withLock { state -> (UInt64, UInt16, UInt64) in
            if milliseconds > state.lastMilliseconds {
                var generator = SystemRandomNumberGenerator()
                state.lastMilliseconds = milliseconds
                state.lastRandomHigh = generator.next()
                state.lastRandomLow = generator.next()
            } else {
                // Same millisecond (or clock went back): increment the 80-bit random part.
                let (sum, overflow) = state.lastRandomLow.addingReportingOverflow(1)
                state.lastRandomLow = sum
                if overflow {
                    let (highSum, highOverflow) = state.lastRandomHigh.addingReportingOverflow(1)
                    state.lastRandomHigh = highSum
                    if highOverflow { state.lastMilliseconds += 1 }  // 2^80 ids in 1 ms: borrow the next ms
                }
            }
            return (state.lastMilliseconds, state.lastRandomHigh, state.lastRandomLow)
        }
        return encode(milliseconds: time, randomHigh: high, randomLow: low)
    }

    /// Encodes the 128-bit value (48-bit time, 16 + 64 random bits) as 26 characters.
    static func encode(milliseconds: UInt64, randomHigh: UInt16, randomLow: UInt64) -> String {
        // 128 bits as two words: hi = time(48) << 16 | randomHigh(16), lo = randomLow.
        let hi = (milliseconds & 0xFFFF_FFFF_FFFF) << 16 | UInt64(randomHigh)
        let lo = randomLow
        var characters = [UInt8](repeating: 0, count: 26)
        // Character i holds bits [125 - 5i ... 129 - 5i] of the 130-bit zero-padded value.
        for position in 0..<26 {
            let shift = 125 - 5 * position  // bit offset of this 5-bit group from the right
            let value: UInt64
            if shift >= 64 {
                value = (hi >> UInt64(shift - 64)) & 0x1F
            } else if shift > 59 {
                value = ((hi << UInt64(64 - shift)) | (lo >> UInt64(shift))) & 0x1F
            } else {
                value = (lo >> UInt64(shift)) & 0x1F
            }
            characters[position] = alphabet[Int(value)]
        }
        return String(decoding: characters, as: UTF8.self)
    }

    /// Whether `text` is a syntactically valid ULID (26 Crockford characters, first ≤ '7').
    /// - Parameter text: The candidate.
    /// - Returns: `true` if valid.
    static func isValid(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 26, bytes[0] <= UInt8(ascii: "7") else { return false }
        return bytes.allSatisfy { alphabet.contains($0) }
    }

    /// The timestamp part of a valid ULID, in milliseconds since the Unix epoch.
    /// - Parameter text: A valid ULID.
    /// - Returns: The milliseconds, or `nil` if `text` is not a valid ULID.
    static func milliseconds(of text: String) -> UInt64? {
        guard isValid(text) else { return nil }
        var value: UInt64 = 0
        for byte in text.utf8.prefix(10) {
            guard let digit = alphabet.firstIndex(of: byte) else { return nil }
            value = value << 5 | UInt64(digit)
        }
        return value
    }

    private static func currentMilliseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec) / 1_000_000
    }
}
