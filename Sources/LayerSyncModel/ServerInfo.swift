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
}
