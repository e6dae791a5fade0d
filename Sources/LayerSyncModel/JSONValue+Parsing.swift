extension JSONValue {
    /// Parses JSON text (RFC 8259; a top-level scalar is allowed).
    /// - Parameter text: The JSON text.
    /// - Returns: The parsed value.
    /// - Throws: `.invalidArgument` when the text is not valid JSON.
    package static func parse(_ text: String) throws(LayerSyncError) -> JSONValue {
        try parse(bytes: Array(text.utf8))
    }

    /// Parses JSON from UTF-8 bytes; invalid UTF-8 inside strings is rejected.
    /// - Parameter bytes: The JSON text as UTF-8.
    /// - Returns: The parsed value.
    /// - Throws: `.invalidArgument` when the bytes are not valid JSON.
    package static func parse(bytes: [UInt8]) throws(LayerSyncError) -> JSONValue {
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

/// Limits shared by the parser and the validator.
private enum JSONParserLimits {
    /// Deepest nesting of arrays and objects accepted.
    static let maximumDepth = 512
}

/// A recursive-descent JSON parser over UTF-8 bytes.
private struct JSONParser: JSONByteScanner {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0
    static let maximumDepth = JSONParserLimits.maximumDepth

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
        if let problem = scanNumber() { throw failure(problem) }
        return .number(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self))
    }

    /// Parses a string; raw bytes are copied unchanged (validated as UTF-8), escapes decoded.
    mutating func parseString() throws(LayerSyncError) -> String {
        index += 1
        // Fast path: no escape (most strings) — validate the bytes in place, no copy.
        var scan = index
        while scan < bytes.count {
            let byte = bytes[scan]
            if byte == UInt8(ascii: "\"") {
                guard let string = String(validating: UnsafeBufferPointer(rebasing: bytes[index..<scan]), as: UTF8.self) else {
                    index = scan + 1
                    throw failure("invalid UTF-8 in string")
                }
                index = scan + 1
                return string
            }
            if byte < 0x20 || byte == UInt8(ascii: "\\") { break }
            scan += 1
        }
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
                switch unicodeEscape() {
                case .scalar(let unicode): output.append(contentsOf: Array(String(Character(unicode)).utf8))
                case .invalid(let problem): throw failure(problem)
                }
            default: throw failure("bad escape")
            }
            runStart = index
        }
        guard let string = String(validating: output, as: UTF8.self) else { throw failure("invalid UTF-8 in string") }
        return string
    }
}

extension JSONValue {
    /// Whether UTF-8 bytes are one JSON text that ``parse(bytes:)`` accepts (same grammar,
    /// nesting limit and string rules), checked without building any value: for text the
    /// engine only passes through, such as stored record content spliced into a request.
    /// - Parameter bytes: The JSON text as UTF-8.
    /// - Returns: `true` if ``parse(bytes:)`` would succeed.
    package static func isValid(bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var validator = JSONValidator(bytes: bytes)
        return validator.validateDocument()
    }
}

/// The grammar of ``JSONParser`` without building values (see ``JSONValue/isValid(bytes:)``).
private struct JSONValidator: JSONByteScanner {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    var depth = 0

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    mutating func validateDocument() -> Bool {
        skipWhitespace()
        guard value() else { return false }
        skipWhitespace()
        return index == bytes.count
    }

    mutating func literal(_ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { return false }
        index += count
        return true
    }

    mutating func value() -> Bool {
        guard index < bytes.count else { return false }
        switch bytes[index] {
        case UInt8(ascii: "{"): return container(close: UInt8(ascii: "}"), keyed: true)
        case UInt8(ascii: "["): return container(close: UInt8(ascii: "]"), keyed: false)
        case UInt8(ascii: "\""): return string()
        case UInt8(ascii: "t"): return literal("true")
        case UInt8(ascii: "f"): return literal("false")
        case UInt8(ascii: "n"): return literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return scanNumber() == nil
        default: return false
        }
    }

    mutating func container(close: UInt8, keyed: Bool) -> Bool {
        depth += 1
        defer { depth -= 1 }
        guard depth <= JSONParserLimits.maximumDepth else { return false }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == close {
            index += 1
            return true
        }
        while true {
            skipWhitespace()
            if keyed {
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), string() else { return false }
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return false }
                index += 1
                skipWhitespace()
            }
            guard value() else { return false }
            skipWhitespace()
            guard index < bytes.count else { return false }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == close { index += 1; return true }
            return false
        }
    }

    /// A string: escapes as ``JSONParser/parseString()`` accepts them, raw bytes valid UTF-8.
    mutating func string() -> Bool {
        index += 1
        while true {
            guard index < bytes.count else { return false }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                return true
            case 0..<0x20:
                return false
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { return false }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                     UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    continue
                case UInt8(ascii: "u"):
                    guard case .scalar = unicodeEscape() else { return false }
                default:
                    return false
                }
            case 0x20..<0x80:
                index += 1
            default:
                guard utf8Sequence() else { return false }
            }
        }
    }

    /// One multi-byte UTF-8 sequence at `index` (RFC 3629: no overlong forms, no surrogates,
    /// nothing above U+10FFFF).
    mutating func utf8Sequence() -> Bool {
        let lead = bytes[index]
        let count: Int
        var lower: UInt8 = 0x80, upper: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: count = 2
        case 0xE0: count = 3; lower = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: count = 3
        case 0xED: count = 3; upper = 0x9F
        case 0xF0: count = 4; lower = 0x90
        case 0xF1...0xF3: count = 4
        case 0xF4: count = 4; upper = 0x8F
        default: return false
        }
        guard index + count <= bytes.count else { return false }
        let second = bytes[index + 1]
        guard second >= lower, second <= upper else { return false }
        for offset in 2..<max(2, count) where bytes[index + offset] & 0xC0 != 0x80 { return false }
        index += count
        return true
    }
}

/// The byte-level pieces of JSON's grammar (RFC 8259) that ``JSONParser`` and
/// ``JSONValidator`` share, so that the two accept exactly the same text.
private protocol JSONByteScanner {
    var bytes: UnsafeBufferPointer<UInt8> { get }
    var index: Int { get set }
}

/// What a `\uXXXX` escape stands for.
private enum UnicodeEscape {
    case scalar(Unicode.Scalar)
    /// Why the escape is not valid (the parser's error message).
    case invalid(String)
}

extension JSONByteScanner {
    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func digits() -> Int {
        let from = index
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        return index - from
    }

    /// Moves past the number at `index` (its first byte is `-` or a digit).
    /// - Returns: `nil`, or why the text is not a number (`index` is where it went wrong).
    mutating func scanNumber() -> String? {
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { return "bad number" }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if digits() == 0 {
            return "bad number"
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { return "bad fraction" }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { return "bad exponent" }
        }
        return nil
    }

    mutating func hex4() -> UInt32? {
        guard index + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: return nil
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    /// Reads the `XXXX` of a `\uXXXX` escape whose `\u` was just consumed; a high surrogate
    /// must be followed by an escaped low one, and the pair is one code point.
    mutating func unicodeEscape() -> UnicodeEscape {
        guard var scalar = hex4() else { return .invalid("bad \\u escape") }
        if (0xD800..<0xDC00).contains(scalar) {
            guard index + 6 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                  bytes[index + 1] == UInt8(ascii: "u") else { return .invalid("lone surrogate") }
            index += 2
            guard let low = hex4() else { return .invalid("bad \\u escape") }
            guard (0xDC00..<0xE000).contains(low) else { return .invalid("bad surrogate pair") }
            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
        } else if (0xDC00..<0xE000).contains(scalar) {
            return .invalid("lone surrogate")
        }
        guard let unicode = Unicode.Scalar(scalar) else { return .invalid("bad code point") }
        return .scalar(unicode)
    }
}
