/// The record schema (docs/protocol.md, "Record schema"): a record of a `pspdfkit/...` type
/// must have the fields Instant JSON requires for that type, each of the JSON type and in the
/// range the format gives. Unknown extra fields and the contents of `customData` are never
/// checked. A `pspdfkit/...` type the schema does not know is refused; a type outside the
/// `pspdfkit/` namespace is the application's own and is not checked.
///
/// The tables (``records``, ``nodes``) are generated from `api/record-schema.json` into
/// `RecordSchema+Generated.swift` by `tools/gen_api.py`; the reference server walks the same
/// tables (`formats/layersync_formats/record_schema.py`) and words its messages the same way, so an
/// edit the engine accepts is one the server accepts.
package enum RecordSchema {
    /// One schema node. `types` is a bit set of the JSON types allowed (null 1, boolean 2,
    /// integer 4, number 8, string 16, array 32, object 64; 127 = any); children are indices
    /// into ``nodes``.
    struct Node: Sendable {
        enum Constant: Sendable {
            case string(String)
            case number(Double)
        }

        var types: Int
        var enumeration: [Constant]? = nil
        var minimum: Double? = nil
        var maximum: Double? = nil
        var minItems: Int? = nil
        var maxItems: Int? = nil
        var isColor = false
        var items: Int? = nil
        var properties: [(String, Int)] = []
        var required: [String] = []
        var anyOf: [Int] = []
    }

    /// Checks a record against the schema of its `type` and `v` (a missing `v` counts as 2,
    /// as it is stored).
    /// - Parameter object: The record (its `type` is a string; the caller checked).
    /// - Throws: `.invalidJSONStructure` whose message names the first offending field.
    package static func check(_ object: JSONObject) throws(LayerSyncError) {
        if let problem = problem(object) {
            throw LayerSyncError(.invalidJSONStructure, problem)
        }
    }

    /// Why `object` breaks the record schema (naming the field), or `nil`.
    package static func problem(_ object: JSONObject) -> String? {
        guard let type = object["type"]?.stringValue else { return nil }  // recordObject requires one
        guard let versions = records[type] else {
            return type.hasPrefix("pspdfkit/") ? #""type": \#(JSONValue.string(type).jsonText) is not an Instant JSON record type"# : nil
        }
        let version = object["v"].map { $0.isIntegral ? $0.int64Value.map(String.init) : nil } ?? defaultVersion
        guard let index = version.flatMap({ versions[$0] }) ?? versions["*"] else {
            return #""v" must be one of \#(versions.keys.sorted().joined(separator: ", ")) for \#(type) records"#
        }
        guard let problem = problem(.object(object), index, path: "") else { return nil }
        return problem.hasSuffix(" is required") ? "\(problem) for \(type) records" : problem
    }

    private static let kinds: [(Int, String)] = [
        (1, "null"), (2, "a boolean"), (4, "an integer"), (8, "a number"), (16, "a string"), (32, "an array"), (64, "an object"),
    ]

    private static func kind(_ value: JSONValue) -> Int {
        switch value {
        case .null: 1
        case .bool: 2
        case .number: value.isIntegral ? 4 | 8 : 8
        case .string: 16
        case .array: 32
        case .object: 64
        }
    }

    private static func numberText(_ value: Double) -> String {
        value.rounded() == value && abs(value) < 9.0e15 ? String(Int64(value)) : String(value)
    }

    private static func isColor(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.count == 7 && bytes[0] == UInt8(ascii: "#") && bytes.dropFirst().allSatisfy {
            (0x30...0x39).contains($0) || (0x41...0x46).contains($0) || (0x61...0x66).contains($0)
        }
    }

    private static func problem(_ value: JSONValue, _ index: Int, path: String) -> String? {
        let node = nodes[index]
        let valueKind = kind(value)
        if valueKind & node.types == 0 {
            let wanted = kinds.filter { node.types & $0.0 != 0 && !($0.0 == 4 && node.types & 8 != 0) }.map(\.1)
            return #""\#(path)" must be \#(wanted.joined(separator: " or "))"#
        }
        if let enumeration = node.enumeration, !enumeration.contains(where: { matches(value, $0) }) {
            let listed = enumeration.map { constant in
                switch constant {
                case .string(let text): JSONValue.string(text).jsonText
                case .number(let number): numberText(number)
                }
            }
            return #""\#(path)" must be one of \#(listed.joined(separator: ", "))"#
        }
        switch value {
        case .number:
            let number = value.doubleValue ?? 0
            if let minimum = node.minimum, number < minimum { return #""\#(path)" must be ≥ \#(numberText(minimum))"# }
            if let maximum = node.maximum, number > maximum { return #""\#(path)" must be ≤ \#(numberText(maximum))"# }
        case .string(let text):
            if node.isColor, !isColor(text) { return ##""\##(path)" must be a color "#rrggbb""## }
        case .array(let elements):
            if let minItems = node.minItems, elements.count < minItems { return #""\#(path)" must have at least \#(minItems) items"# }
            if let maxItems = node.maxItems, elements.count > maxItems { return #""\#(path)" must have at most \#(maxItems) items"# }
            if let items = node.items {
                for (offset, element) in elements.enumerated() {
                    if let problem = problem(element, items, path: "\(path)[\(offset)]") { return problem }
                }
            }
        case .object(let object):
            let prefix = path.isEmpty ? "" : path + "."
            for name in node.required where object[name] == nil {
                return #""\#(prefix)\#(name)" is required"#
            }
            for (name, child) in node.properties {
                if let member = object[name], let problem = problem(member, child, path: prefix + name) { return problem }
            }
        case .null, .bool:
            break
        }
        if !node.anyOf.isEmpty, node.anyOf.allSatisfy({ problem(value, $0, path: path) != nil }) {
            return #""\#(path)" matches none of its allowed forms"#
        }
        return nil
    }

    private static func matches(_ value: JSONValue, _ constant: Node.Constant) -> Bool {
        switch (value, constant) {
        case (.string(let text), .string(let wanted)): text == wanted
        case (.number, .number(let wanted)): value.doubleValue == wanted
        default: false
        }
    }
}

extension JSONValue {
    /// Whether this is a number with an integral value (`2`, `2.0`, `2e0`), as JSON Schema's
    /// `integer` counts them.
    var isIntegral: Bool {
        guard case .number(let text) = self, let number = Double(text) else { return false }
        return number.rounded() == number
    }
}
