/// A generic JSON value that keeps what the engine must not change:
/// object key order, string values byte-exact, and numbers as their original text.
///
/// Instant JSON is arbitrary JSON, so records are held as `JSONValue` rather than
/// decoded into fixed types. Parsing is in `JSONValue+Parsing.swift`, writing in
/// `JSONValue+Writing.swift`.
package enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// A number, kept as its JSON text (e.g. `"1.50"`) so it round-trips exactly.
    case number(String)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The string value, or `nil` for any other kind.
    package var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The number as an `Int64`, or `nil` if not an integral number that fits.
    package var int64Value: Int64? {
        guard case .number(let text) = self else { return nil }
        if let value = Int64(text) { return value }
        if let double = Double(text), double.rounded() == double, abs(double) < 9.0e15 { return Int64(double) }
        return nil
    }

    /// The number as a `Double`, or `nil` for any other kind.
    var doubleValue: Double? {
        guard case .number(let text) = self else { return nil }
        return Double(text)
    }

    /// The bool value, or `nil` for any other kind.
    package var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The elements, or `nil` for any other kind.
    package var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The object, or `nil` for any other kind.
    var objectValue: JSONObject? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// `true` for `.null`.
    package var isNull: Bool { self == .null }

    /// Member lookup on objects; `nil` for missing keys and non-objects.
    package subscript(key: String) -> JSONValue? { objectValue?[key] }

    /// A JSON number for an integer.
    package static func integer<T: BinaryInteger>(_ value: T) -> JSONValue { .number(String(value)) }
}

/// A JSON object whose members keep their order. A duplicate key in parsed text
/// replaces the earlier value in place (last one wins, as in jansson and Python).
package struct JSONObject: Sendable, Equatable {
    /// One member.
    package struct Member: Sendable, Equatable {
        package var key: String
        package var value: JSONValue
    }

    /// Members in document order.
    package private(set) var members: [Member] = []

    /// An empty object.
    package init() {}

    /// An object from ordered key/value pairs.
    /// - Parameter pairs: Members in order; later duplicates replace earlier ones.
    package init(_ pairs: [(String, JSONValue)]) {
        for (key, value) in pairs { self[key] = value }
    }

    /// Gets, replaces (keeping position), appends, or (with `nil`) removes a member.
    package subscript(key: String) -> JSONValue? {
        get { members.first { $0.key == key }?.value }
        set {
            let index = members.firstIndex { $0.key == key }
            switch (index, newValue) {
            case (let index?, let value?): members[index].value = value
            case (let index?, nil): members.remove(at: index)
            case (nil, let value?): members.append(Member(key: key, value: value))
            case (nil, nil): break
            }
        }
    }

    /// The keys in order.
    var keys: [String] { members.map(\.key) }

    /// Number of members.
    var count: Int { members.count }
}
