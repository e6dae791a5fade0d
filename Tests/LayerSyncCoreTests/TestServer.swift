import Foundation
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel
@testable import LayerSyncStore
@testable import LayerSyncTransport

/// The real Python reference server (`server/`) on loopback, one per test, with its own
/// temporary directory, keys, SQLite database and admin token `secret`.
final class TestServer: @unchecked Sendable {
    static let executable = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent(".venv/bin/layersync-server").path
    /// A corpus PDF: `$LAYERSYNC_CORPUS` (the Makefile sets it from `SHARED`), else the shared
    /// corpus beside the checkout (`../shared/corpus/pdf`).
    static let corpusPDF: String = {
        let corpus = ProcessInfo.processInfo.environment["LAYERSYNC_CORPUS"]
            ?? URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("shared/corpus/pdf").path
        return corpus + "/sample-files-024-annotated_pdf.pdf"
    }()

    /// Whether the server can run here; integration tests are skipped otherwise.
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: executable) }

    let directory: String
    private(set) var port: Int = 0
    private var process: Process?
    private let extraArguments: [String]

    var url: String { "http://127.0.0.1:\(port)" }

    /// Starts a server.
    /// - Parameter extraArguments: More `serve` options, e.g. `--max-request-bytes`.
    init(extraArguments: [String] = []) throws {
        directory = NSTemporaryDirectory() + "layersync-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.extraArguments = extraArguments
        _ = try Self.run(["keygen", "--out", directory])
        try start(port: 0)
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)  // keys, database, client stores
    }

    /// Starts (or restarts) `serve`, waiting for its port file.
    func start(port requested: Int) throws {
        let portFile = directory + "/port"
        try? FileManager.default.removeItem(atPath: portFile)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = ["serve", "--host", "127.0.0.1", "--port", String(requested), "--db", directory + "/server.sqlite",
                             "--public-key", directory + "/public.pem", "--admin-token", "secret",
                             "--port-file", portFile, "--log-level", "warning"] + extraArguments
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        self.process = process
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if let text = try? String(contentsOfFile: portFile, encoding: .utf8),
               let value = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), value > 0 {
                port = value
                // The port file is written when the socket listens; confirm with a request.
                if (try? Self.httpGet(url + "/sync/v1/info")) != nil { return }
            }
            guard process.isRunning else { throw TestFailure("layersync-server exited with \(process.terminationStatus)") }
            usleep(50_000)
        }
        throw TestFailure("layersync-server did not become ready")
    }

    /// Stops the server process at once (SIGKILL: an abrupt stop, with no answer to parked
    /// long-polls, is what "unreachable" tests want; SIGTERM would end them cleanly).
    func stop() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    /// Uploads the corpus PDF as `documentID`.
    func upload(documentID: String, pdf: String = TestServer.corpusPDF) throws {
        _ = try Self.run(["upload", "--url", url, "--admin-token", "secret", pdf, "--document-id", documentID])
    }

    /// Mints a JWT.
    func token(documentID: String, layer: String? = nil, userID: String? = nil, expiresIn: Int? = nil) throws -> String {
        var arguments = ["mint-token", "--private-key", directory + "/private.pem", "--document-id", documentID]
        if let layer { arguments += ["--layer", layer] }
        if let userID { arguments += ["--user-id", userID] }
        if let expiresIn { arguments += ["--expires-in", String(expiresIn)] }
        return try Self.run(arguments).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The layer's records per the admin API: id → content.
    func serverAnnotations(documentID: String) throws -> [String: JSONValue] {
        let admin = ["Authorization": "Token token=\"secret\""]
        let body = try Self.httpGet(url + "/api/documents/\(documentID)/annotations", headers: admin)
        var result: [String: JSONValue] = [:]
        for item in try JSONValue.parse(body)["data"]?["annotations"]?.arrayValue ?? [] {
            if let id = item["id"]?.stringValue, let content = item["content"] { result[id] = content }
        }
        // Document Engine's listing holds annotations only; comments are in document.json's
        // `comments` (their content carries the record id).
        let document = try Self.httpGet(url + "/api/documents/\(documentID)/document.json", headers: admin)
        for content in try JSONValue.parse(document)["comments"]?.arrayValue ?? [] {
            if let id = content["id"]?.stringValue { result[id] = content }
        }
        return result
    }

    /// A fresh client storage directory below the server's temp directory.
    func storagePath(_ name: String) -> String { directory + "/client-" + name }

    /// A client of this server (or of `url`, e.g. a proxy in front of it) with its own
    /// storage; returns once the connection sequence has run.
    func makeClient(_ name: String, url: String? = nil, syncDelay: Double = -1, storage: String? = nil,
                    durability: CommitDurability = .full) throws -> TestClient {
        let events = EventRecorder()
        var configuration = ClientConfiguration(serverURL: url ?? self.url, storagePath: storage ?? storagePath(name))
        configuration.syncDelay = syncDelay
        configuration.localWriteDurability = durability
        configuration.longPollWait = 5
        configuration.connectTimeout = 2
        configuration.requestTimeout = 10
        let client = try SyncClient(configuration: configuration, eventHandler: events.handler)
        _ = events.waitForValidation()
        return TestClient(client: client, events: events)
    }

    static func run(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestFailure("layersync-server \(arguments.first ?? "") failed with \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// A minimal blocking GET through the engine's own curl session.
    static func httpGet(_ url: String, headers: [String: String] = [:]) throws -> String {
        let session = HTTPSession(connectTimeoutSeconds: 2)
        var request = HTTPRequest(url: url)
        request.headers = headers.map { "\($0): \($1)" }
        request.timeoutSeconds = 5
        let response = try session.perform(request, cancellation: TransferCancellation())
        guard response.status == 200 else { throw TestFailure("GET \(url): HTTP \(response.status)") }
        return String(decoding: response.body, as: UTF8.self)
    }
}

/// A client and the recorder of its events.
struct TestClient {
    let client: SyncClient
    let events: EventRecorder
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

extension TestServer {
    /// An Instant JSON note (or, with `rootID`, a comment on that root) whose `note` is `text`.
    static func note(_ text: String, id: String? = nil, rootID: String? = nil) -> String {
        var object = JSONObject()
        if let id { object["id"] = .string(id) }
        object["type"] = .string(rootID == nil ? "pspdfkit/note" : "pspdfkit/comment")
        object["pageIndex"] = .integer(0)
        object["bbox"] = .array([.integer(1), .integer(2), .integer(3), .integer(4)])
        object["note"] = .string(text)
        object["text"] = .object(JSONObject([("format", .string("plain")), ("value", .string(""))]))
        if rootID == nil { object["icon"] = .string("comment") }
        if let rootID { object["rootId"] = .string(rootID) }
        return JSONValue.object(object).jsonText
    }
}
