/// A validated sync server base URL (`http[s]://host[:port][/prefix]`).
package struct ServerURL: Sendable, Equatable {
    /// `http` or `https`.
    package var scheme: String
    /// Host as written (IPv6 without brackets).
    package var host: String
    /// Explicit port, if any.
    package var port: Int?
    /// Path prefix without trailing slash (`""` or `/prefix`).
    var pathPrefix: String

    /// Parses and checks a server URL.
    /// - Parameters:
    ///   - text: The URL text.
    ///   - allowInsecureHTTP: Whether plain `http://` is allowed for non-loopback hosts.
    /// - Throws: `.invalidURL` for anything that is not an absolute http(s) URL without
    ///   query, fragment or user info, or for plain http to a non-loopback host when not allowed.
    package init(_ text: String, allowInsecureHTTP: Bool) throws(LayerSyncError) {
        func invalid(_ why: String) -> LayerSyncError { LayerSyncError(.invalidURL, "invalid server URL '\(text)': \(why)") }
        let lowered = text.lowercased()
        let scheme: String
        if lowered.hasPrefix("https://") {
            scheme = "https"
        } else if lowered.hasPrefix("http://") {
            scheme = "http"
        } else {
            throw invalid("scheme must be http:// or https://")
        }
        var rest = text.dropFirst(scheme.count + 3)
        let forbidden: Set<Character> = ["?", "#", " ", "@", "\\"]
        guard !rest.contains(where: { forbidden.contains($0) }) else {
            throw invalid("query, fragment, user info and spaces are not allowed")
        }
        var authority = rest
        var path = Substring("")
        if let slash = rest.firstIndex(of: "/") {
            authority = rest[..<slash]
            path = rest[slash...]
        }
        rest = authority
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw invalid("unclosed IPv6 bracket") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw invalid("garbage after IPv6 host") }
                portText = after.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { throw invalid("empty host") }
        let punctuation: Set<Character> = ["-", ".", "_", ":"]
        guard host.allSatisfy({ character in
            character.isASCII && (character.isLetter || character.isNumber || punctuation.contains(character))
        }) else {
            throw invalid("bad host")
        }
        var port: Int?
        if let portText {
            guard let value = Int(portText), (1...65535).contains(value) else { throw invalid("bad port") }
            port = value
        }
        while path.hasSuffix("/") { path = path.dropLast() }
        self.scheme = scheme
        self.host = host.lowercased()
        self.port = port
        self.pathPrefix = String(path)
        if scheme == "http", !allowInsecureHTTP, !isLoopback {
            throw invalid("plain http is only allowed to loopback hosts unless allowInsecureHTTP is set")
        }
    }

    /// Whether the host is `localhost`, in 127.0.0.0/8, or `::1`.
    var isLoopback: Bool {
        if host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        return octets.count == 4 && octets[0] == "127" && octets.allSatisfy { UInt8($0) != nil }
    }

    /// The normalised base URL without trailing slash.
    package var base: String {
        let hostPart = host.contains(":") ? "[\(host)]" : host
        return "\(scheme)://\(hostPart)\(port.map { ":\($0)" } ?? "")\(pathPrefix)"
    }

    /// An absolute URL for a path below the base.
    /// - Parameter path: A path starting with `/`, already percent-encoded.
    /// - Returns: The URL text.
    package func url(_ path: String) -> String { base + path }

    /// Percent-encodes one path segment (RFC 3986 unreserved characters stay as they are).
    /// - Parameter segment: The raw segment.
    /// - Returns: The encoded segment.
    package static func encodeSegment(_ segment: String) -> String {
        var output: [UInt8] = []
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in segment.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.append(byte)
            default:
                output.append(UInt8(ascii: "%"))
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0xF)])
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// The `{layer}` path segment: `~` for the default layer, else the encoded name.
    /// - Parameter layerName: The layer name.
    /// - Returns: The encoded segment.
    package static func layerSegment(_ layerName: String) -> String {
        layerName.isEmpty ? "~" : encodeSegment(layerName)
    }
}
