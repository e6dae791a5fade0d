/// What the server told about itself in `GET /sync/v1/info` (protocol.md).
public struct ServerInfo: Sendable {
    /// The server's version string (`server_version`).
    public var serverVersion: String
    /// The oldest protocol version the server speaks (`protocol.min`).
    public var protocolMin: Int
    /// The newest protocol version the server speaks (`protocol.max`).
    public var protocolMax: Int
    /// The largest request body the server accepts, in bytes (`limits.max_request_bytes`).
    public var maxRequestBytes: Int
    /// Feature names the server offers, e.g. `"long-poll"`.
    public var capabilities: [String]
    /// The raw body of the `/sync/v1/info` answer.
    public var json: String
    /// The change stream's path (protocol version 2, `"stream": {"path", "heartbeat_s"}` in the
    /// info), `nil` when the server does not advertise one (a version-1 server: listening
    /// then uses per-layer long-polls).
    public var streamPath: String?
    /// Seconds of silence after which the server sends a heartbeat on the stream (`heartbeat_s`).
    public var streamHeartbeatSeconds: Double = 15

    /// Creates server info.
    /// - Parameters:
    ///   - serverVersion: The server's version string.
    ///   - protocolMin: Oldest protocol version spoken.
    ///   - protocolMax: Newest protocol version spoken.
    ///   - maxRequestBytes: Largest accepted request body in bytes.
    ///   - capabilities: Feature names.
    ///   - json: The raw info body.
    package init(serverVersion: String, protocolMin: Int, protocolMax: Int, maxRequestBytes: Int,
                 capabilities: [String], json: String) {
        self.serverVersion = serverVersion
        self.protocolMin = protocolMin
        self.protocolMax = protocolMax
        self.maxRequestBytes = maxRequestBytes
        self.capabilities = capabilities
        self.json = json
    }

    /// Decodes and checks `GET /sync/v1/info` (protocol.md): `protocol.min` and `protocol.max`
    /// integers with min ≤ max are required; `server_version` (a string),
    /// `limits.max_request_bytes` (a positive integer) and `capabilities` (strings) are
    /// optional (defaults: `""`, 4 MiB, none) but checked when present. Unknown keys are ignored.
    /// - Parameter body: The answer's body.
    /// - Throws: `.invalidServerData` saying what was wrong.
    package init(body: [UInt8]) throws(LayerSyncError) {
        let name = "GET /sync/v1/info"
        guard let json = try? JSONValue.parse(bytes: body), json.objectValue != nil,
              let protocolInfo = json["protocol"], protocolInfo.objectValue != nil else {
            throw LayerSyncError(.invalidServerData, "\(name) did not answer a LayerSync info object")
        }
        let versions = try AnswerFields(protocolInfo, name: "\(name): protocol")
        let minimum = try versions.count("min")
        let maximum = try versions.count("max")
        let fields = try AnswerFields(json, name: name)
        guard minimum <= maximum, maximum <= Int64(Int32.max) else {
            throw fields.invalid("protocol min \(minimum) / max \(maximum) is not a range")
        }
        var maxRequestBytes: Int64 = 4_194_304
        if let limits = json["limits"], !limits.isNull {
            let limitFields = try AnswerFields(limits, name: "\(name): limits")
            if limits["max_request_bytes"] != nil {
                maxRequestBytes = try limitFields.count("max_request_bytes")
                guard maxRequestBytes > 0 else { throw limitFields.invalid("\"max_request_bytes\" is 0") }
            }
        }
        var capabilities: [String] = []
        if let list = json["capabilities"], !list.isNull {
            guard let items = list.arrayValue else { throw fields.invalid("\"capabilities\" is not an array") }
            for item in items {
                guard let capability = item.stringValue else { throw fields.invalid("\"capabilities\" holds a non-string") }
                capabilities.append(capability)
            }
        }
        self.init(serverVersion: try fields.optionalString("server_version") ?? "", protocolMin: Int(minimum),
                  protocolMax: Int(maximum), maxRequestBytes: Int(clamping: maxRequestBytes), capabilities: capabilities,
                  json: String(decoding: body, as: UTF8.self))
        // The stream (protocol version 2): the object `stream` (or only the capability "stream",
        // then at its default path); only a server whose protocol range reaches 2 offers it.
        if maximum >= 2, let stream = json["stream"], stream.objectValue != nil {
            let streamFields = try AnswerFields(stream, name: "\(name): stream")
            let path = try streamFields.string("path")
            guard path.hasPrefix("/"), !path.contains("?"), !path.contains("#") else {
                throw streamFields.invalid("\"path\" \(path) is not an absolute path")
            }
            streamPath = path
            if let value = stream["heartbeat_s"], !value.isNull {
                guard let heartbeat = value.doubleValue, heartbeat > 0, heartbeat <= 3600 else {
                    throw streamFields.invalid("\"heartbeat_s\" is not a number of seconds in (0, 3600]")
                }
                streamHeartbeatSeconds = heartbeat
            }
        } else if maximum >= 2, capabilities.contains("stream") {
            streamPath = "/sync/v2/stream"
        }
    }
}
