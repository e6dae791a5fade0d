extension JSONValue {
    /// Parses JSON text (RFC 8259; a top-level scalar is allowed).
    /// - Parameter text: The JSON text.
    /// - Returns: The parsed value.
    /// - Throws: `.invalidArgument` when the text is not valid JSON.
    static func parse(_ text: String) throws(LayerSyncError) -> JSONValue {
        try parse(bytes: Array(text.utf8))
    }

    /// Parses JSON from UTF-8 bytes; invalid UTF-8 inside strings is rejected.
    /// - Parameter bytes: The JSON text as UTF-8.
    /// - Returns: The parsed value.
    /// - Throws: `.invalidArgument` when the bytes are not valid JSON.
    static func parse(bytes: [UInt8]) throws(LayerSyncError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { buffer throws(LayerSyncError) in try parse(bytes: buffer) }
    }

    /// Parses JSON from a UTF-8 buffer.
    /// - Parameter bytes: The JSON text as UTF-8.
    /// - Returns: The parsed value.
    /// - Throws: `.invalidArgument` when the bytes are not valid JSON.
    static func parse(bytes: UnsafeBufferPointer<UInt8>) throws(LayerSyncError) -> JSONValue {
        var parser = JSONParser(bytes: bytes)
        return try parser.parseDocument()
    }
}

/// A recursive-descent JSON parser over UTF-8 bytes.
private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0
    static let maximumDepth = 512

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    func failure(_ what: String) -> LayerSyncError {
        LayerSyncError(.invalidArgument, "invalid JSON: \(what) at byte \(index)")
    }

    mutating func parseDocument() throws(LayerSyncError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw failure("trailing characters") }
        return value
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func expect(_ literal: StaticString, _ value: JSONValue) throws(LayerSyncError) -> JSONValue {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw failure("unexpected end") }
        for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] {
            throw failure("unexpected literal")
        }
        index += count
        return value
    }

    mutating func parseValue() throws(LayerSyncError) -> JSONValue {
        guard index < bytes.count else { throw failure("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "n"): return try expect("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw failure("unexpected character")
        }
    }

    mutating func enter() throws(LayerSyncError) {
        depth += 1
        guard depth <= Self.maximumDepth else { throw failure("nesting too deep") }
    }

    mutating func parseObject() throws(LayerSyncError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        index += 1
        var object = JSONObject()
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("expected key") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure("expected ':'") }
            index += 1
            skipWhitespace()
            object[key] = try parseValue()
            skipWhitespace()
            guard index < bytes.count else { throw failure("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(object) }
            throw failure("expected ',' or '}'")
        }
    }

    mutating func parseArray() throws(LayerSyncError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw failure("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            throw failure("expected ',' or ']'")
        }
    }

    mutating func parseNumber() throws(LayerSyncError) -> JSONValue {
        let start = index
        func digits(_ parser: inout JSONParser) -> Int {
            let from = parser.index
            while parser.index < parser.bytes.count,
                  (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(parser.bytes[parser.index]) {
                parser.index += 1
            }
            return parser.index - from
        }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw failure("bad number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if digits(&self) == 0 {
            throw failure("bad number")
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw failure("bad fraction") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard digits(&self) > 0 else { throw failure("bad exponent") }
        }
        return .number(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self))
    }

    mutating func parseHex4() throws(LayerSyncError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("bad \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw failure("bad \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    /// Parses a string; raw bytes are copied unchanged (validated as UTF-8), escapes decoded.
    mutating func parseString() throws(LayerSyncError) -> String {
        index += 1
        var output: [UInt8] = []
        var runStart = index
        while true {
            guard index < bytes.count else { throw failure("unterminated string") }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                output.append(contentsOf: bytes[runStart..<index])
                index += 1
                break
            }
            if byte < 0x20 { throw failure("control character in string") }
            if byte != UInt8(ascii: "\\") { index += 1; continue }
            output.append(contentsOf: bytes[runStart..<index])
            index += 1
            guard index < bytes.count else { throw failure("unterminated escape") }
            let escape = bytes[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""): output.append(0x22)
            case UInt8(ascii: "\\"): output.append(0x5C)
            case UInt8(ascii: "/"): output.append(0x2F)
            case UInt8(ascii: "b"): output.append(0x08)
            case UInt8(ascii: "f"): output.append(0x0C)
            case UInt8(ascii: "n"): output.append(0x0A)
            case UInt8(ascii: "r"): output.append(0x0D)
            case UInt8(ascii: "t"): output.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try parseHex4()
                if (0xD800..<0xDC00).contains(scalar) {
                    guard index + 6 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                          bytes[index + 1] == UInt8(ascii: "u") else { throw failure("lone surrogate") }
                    index += 2
                    let low = try parseHex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw failure("bad surrogate pair") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00..<0xE000).contains(scalar) {
                    throw failure("lone surrogate")
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw failure("bad code point") }
                output.append(contentsOf: Array(String(Character(unicode)).utf8))
            default: throw failure("bad escape")
            }
            runStart = index
        }
        guard let string = String(validating: output, as: UTF8.self) else { throw failure("invalid UTF-8 in string") }
        return string
    }
}
