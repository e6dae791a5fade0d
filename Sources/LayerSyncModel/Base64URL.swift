/// Base64url decoding (RFC 4648 §5), padding optional, as used by JWT (RFC 7515).
enum Base64URL {
    /// Decodes base64url text.
    /// - Parameter text: The encoded text; `-`/`_` alphabet, `=` padding optional.
    /// - Returns: The bytes, or `nil` if `text` is not valid base64url.
    static func decode(_ text: Substring) -> [UInt8]? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count * 3 / 4)
        var buffer: UInt32 = 0
        var bits = 0
        var padding = 0
        for character in text.utf8 {
            let value: UInt32
            switch character {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = UInt32(character - UInt8(ascii: "A"))
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = UInt32(character - UInt8(ascii: "a")) + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = UInt32(character - UInt8(ascii: "0")) + 52
            case UInt8(ascii: "-"): value = 62
            case UInt8(ascii: "_"): value = 63
            case UInt8(ascii: "="): padding += 1; continue
            default: return nil
            }
            guard padding == 0 else { return nil }
            buffer = buffer << 6 | value
            bits += 6
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8((buffer >> UInt32(bits)) & 0xFF))
            }
        }
        // A single leftover character (6 bits) can never be valid.
        guard bits < 6, padding <= 2 else { return nil }
        return bytes
    }
}
