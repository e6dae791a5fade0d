/// Limits that every record must respect before the engine stores or sends it, so that
/// one record can never make the layer unreadable for other clients or block the queue.
///
/// The reference server enforces the same limits (docs/protocol.md, "Record limits");
/// checking them at the API turns a would-be server rejection into an immediate
/// `INVALID_JSON_STRUCTURE` that loses nothing.
package enum RecordLimits {
    /// Deepest nesting of objects and arrays inside one record (the record itself is 1).
    /// Instant JSON records nest a few levels; ink `lines` are the deepest at 4.
    static let maximumDepth = 64
    /// Longest number literal. JSON numbers are kept as text; over-long ones (e.g. a
    /// 5,000-digit integer) cannot be parsed by common JSON libraries (Python refuses
    /// integers over 4,300 digits).
    static let maximumNumberLength = 100

    /// Checks `value` against the limits.
    /// - Throws: `.invalidJSONStructure` naming the first violation.
    package static func check(_ value: JSONValue) throws(LayerSyncError) {
        try check(value, depth: 1)
    }

    private static func check(_ value: JSONValue, depth: Int) throws(LayerSyncError) {
        switch value {
        case .null, .bool, .string:
            return
        case .number(let text):
            guard text.utf8.count <= maximumNumberLength else {
                throw LayerSyncError(.invalidJSONStructure, "a number in the record has more than \(maximumNumberLength) characters")
            }
            guard let number = Double(text), number.isFinite else {
                throw LayerSyncError(.invalidJSONStructure, "a number in the record (\(text)) is not a finite double")
            }
        case .array(let items):
            guard depth <= maximumDepth else { throw tooDeep() }
            for item in items { try check(item, depth: depth + 1) }
        case .object(let object):
            guard depth <= maximumDepth else { throw tooDeep() }
            for member in object.members { try check(member.value, depth: depth + 1) }
        }
    }

    private static func tooDeep() -> LayerSyncError {
        LayerSyncError(.invalidJSONStructure, "the record nests objects and arrays deeper than \(maximumDepth) levels")
    }

    /// Whether `id` is a valid record id: 1–128 characters, no control characters
    /// (U+0000–U+001F, U+007F), as docs/protocol.md requires.
    package static func isValidID(_ id: String) -> Bool {
        (1...128).contains(id.count) && !id.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }
}
