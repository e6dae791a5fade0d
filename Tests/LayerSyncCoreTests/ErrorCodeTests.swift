import Foundation
import Synchronization
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

/// Error codes of docs/architecture.md §5, each produced by a real situation (the others are
/// covered next to their feature: ACCESS_DENIED, ALREADY_DOWNLOADED, INVALID_URL,
/// NO_SUCH_ANNOTATION, REQUEST_FAILED, INVALID_JWT, USER_ID_MISMATCH, the attachment codes,
/// CONTENT_MIGRATION_NEEDED, PERFORMING_CONTENT_MIGRATION, INVALID_JSON_STRUCTURE,
/// INVALID_CUSTOM_DATA, INVALID_ARGUMENT, STORAGE_LOCKED, SERVER_RESET, CONFLICT,
/// NOT_DOWNLOADED, INVALID_STATE, PAYLOAD_LIMIT_EXCEEDED in rejections).
@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class ErrorCodeTests {
    let helper: RecordFeatureTests
    var server: TestServer { helper.server }

    init() throws { helper = try RecordFeatureTests() }

    func client(_ name: String, url: String) throws -> (SyncClient, EventRecorder) {
        let events = EventRecorder()
        var configuration = ClientConfiguration(serverURL: url, storagePath: server.storagePath(name))
        configuration.syncDelay = -1
        configuration.connectTimeout = 2
        let client = try SyncClient(configuration: configuration, eventHandler: events.handler)
        return (client, events)
    }

    func failedSync(_ events: EventRecorder, _ document: DocumentDescriptor) throws -> LayerSyncError {
        let start = events.count
        try document.sync()
        let end = try #require(events.waitForSyncEnd(document, after: start), "the sync did not end")
        return try #require(end, "the sync succeeded")
    }

    static let info = #"{"server":"proxy","server_version":"0","protocol":{"min":1,"max":1},"limits":{"max_request_bytes":4194304},"capabilities":[]}"#

    @Test func serverAnswersMapToUnknownInvalidServerDataAndFeatureUnsupported() throws {
        try server.upload(documentID: "doc")
        let mode = Mutex<Int>(0)
        let proxy = try FaultProxy(upstreamPort: server.port) { head in
            if head.hasPrefix("GET /sync/v1/info ") { return .respond(200, Self.info) }  // no capabilities
            guard head.hasPrefix("POST "), head.contains("/sync ") else { return .forward }
            switch mode.withLock({ $0 }) {
            case 1: return .reply(418)
            case 2: return .respond(200, #"{"accepted": "nonsense"}"#)
            default: return .forward
            }
        }
        defer { proxy.stop() }
        let (client, events) = try client("a", url: proxy.url)
        _ = events.waitForValidation()
        let document = try helper.downloaded(client, events)
        _ = try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"}"#)
        mode.withLock { $0 = 1 }
        let unknown = try failedSync(events, document)
        #expect(unknown.code == .unknown && unknown.httpStatus == 418)
        mode.withLock { $0 = 2 }
        #expect(try failedSync(events, document).code == .invalidServerData)
        #expect(document.hasUnsyncedChanges)
        let history = try helper.completed { completion throws(LayerSyncError) in
            try document.annotationHistory(id: "x", completion: completion)
        }
        if case .failure(let error) = history { #expect(error.code == .featureUnsupported) } else { Issue.record("history without the capability") }
        try client.shutdown()
    }

    @Test(arguments: [(#"{"min":2,"max":3}"#, ErrorCode.oldClient), (#"{"min":0,"max":0}"#, .oldServer)])
    func protocolVersionMismatchIsReportedAtValidation(protocolJSON: String, code: ErrorCode) throws {
        let body = #"{"server":"proxy","server_version":"9","protocol":"# + protocolJSON + #","limits":{},"capabilities":[]}"#
        let proxy = try FaultProxy(upstreamPort: server.port) { _ in .respond(200, body) }
        defer { proxy.stop() }
        let (client, events) = try client("a", url: proxy.url)
        let result = try #require(events.waitForValidation())
        if case .failure(let error) = result { #expect(error.code == code) } else { Issue.record("validated protocol \(protocolJSON)") }
        try client.shutdown()
    }

    @Test func aDocumentTheServerDoesNotHaveIsAnInvalidDocument() throws {
        let (client, events) = try client("a", url: server.url)
        let document = try client.document(forJWT: try server.token(documentID: "missing"))
        try document.download()
        #expect(try #require(events.waitForDownload(document))?.code == .invalidDocument)
        try client.shutdown()
    }

    @Test func aCorruptLayerStoreIsDatabaseAccessFailedWithTheSQLiteExtendedCode() throws {
        let (client, _) = try client("a", url: server.url)
        let directory = client.context.layout.layerDirectory("doc", layer: "")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try Data(repeating: 0x42, count: 8192).write(to: URL(fileURLWithPath: directory + "/layer.sqlite"))
        let token = try server.token(documentID: "doc")
        do throws(LayerSyncError) {
            _ = try client.document(forJWT: token)
            Issue.record("a corrupt store was opened")
        } catch {
            #expect(error.code == .databaseAccessFailed)
            #expect(error.sqliteExtendedCode == 26)  // SQLITE_NOTADB
        }
        try client.shutdown()
    }

    @Test func storageThatCannotBeCreatedIsCouldNotWriteToDisk() throws {
        let file = server.storagePath("file")
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        do throws(LayerSyncError) {
            _ = try SyncClient(configuration: ClientConfiguration(serverURL: server.url, storagePath: file + "/store")) { _ in }
            Issue.record("storage below a regular file was accepted")
        } catch {
            #expect(error.code == .couldNotWriteToDisk)
        }
    }

    @Test func anAttachmentRemovedFromTheCacheBeforeUploadIsCouldNotReadFromDiskCache() throws {
        try server.upload(documentID: "doc")
        let (client, events) = try client("a", url: server.url)
        let document = try helper.downloaded(client, events)
        let id = try document.addAttachment(bytes: Array("bytes".utf8), contentType: "text/plain")
        try FileManager.default.removeItem(atPath: document.attachmentsDirectory + "/" + id)
        // The upload can never happen: it is rejected alone with this code, the cycle goes on.
        let start = events.count
        #expect(try helper.sync(events, document) == nil)
        let rejected = events.wait(after: start) { event -> RejectedChange? in
            if case .didRejectChanges(_, let changes) = event { return changes.first }
            return nil
        }
        #expect(rejected?.code == .couldNotReadFromDiskCache && rejected?.recordID == id)
        try client.shutdown()
    }

    @Test func rollingBackToADeletionIsAnInvalidRequest() throws {
        try server.upload(documentID: "doc")
        let (client, events) = try client("a", url: server.url)
        let document = try helper.downloaded(client, events)
        let id = try helper.id(try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"}"#))
        #expect(try helper.sync(events, document) == nil)
        try document.deleteAnnotation(id: id)
        #expect(try helper.sync(events, document) == nil)
        let versions = try JSONValue.parse(try helper.completed { completion throws(LayerSyncError) in
            try document.annotationHistory(id: id, completion: completion)
        }.get()).arrayValue ?? []
        let deletion = try #require(versions.first { $0["deleted"] == .bool(true) }?["revision"]?.int64Value)
        let result = try helper.completed { completion throws(LayerSyncError) in
            try document.rollbackAnnotation(id: id, revision: deletion, completion: completion)
        }
        if case .failure(let error) = result { #expect(error.code == .invalidRequest && error.httpStatus == 400) } else {
            Issue.record("rolled back to a deletion")
        }
        try client.shutdown()
    }

    @Test func aSecondReauthenticationWhileOneRunsIsAlreadyAuthenticatingAndADownloadCanBeCancelled() throws {
        try server.upload(documentID: "doc")
        let gate = DispatchSemaphore(value: 0)
        let holding = Mutex<String>("")
        let proxy = try FaultProxy(upstreamPort: server.port) { head in
            let pattern = holding.withLock { $0 }
            return !pattern.isEmpty && head.contains(pattern) ? .hold(gate) : .forward
        }
        defer {
            for _ in 0..<4 { gate.signal() }
            proxy.stop()
        }
        let (client, events) = try client("a", url: proxy.url)
        _ = events.waitForValidation()
        let document = try client.document(forJWT: try server.token(documentID: "doc", userID: "alice"))

        // CANCELLED: the PDF request is held in the proxy; cancelling aborts it at once.
        holding.withLock { $0 = "/pdf " }
        try document.download()
        document.cancelDownload()
        #expect(try #require(events.waitForDownload(document))?.code == .cancelled)
        gate.signal()
        holding.withLock { $0 = "" }
        try document.download()
        #expect(try #require(events.waitForDownload(document, timeout: 30, after: events.count)) == nil)

        // ALREADY_AUTHENTICATING: the verification request of the first is held.
        holding.withLock { $0 = "limit=1" }
        let second = try server.token(documentID: "doc", userID: "alice")
        try document.reauthenticate(jwt: try server.token(documentID: "doc", userID: "alice"))
        do throws(LayerSyncError) {
            try document.reauthenticate(jwt: second)
            Issue.record("a second reauthentication was started")
        } catch {
            #expect(error.code == .alreadyAuthenticating)
        }
        gate.signal()
        #expect(events.wait { if case .didFinishReauthentication = $0 { return true }; return nil } == true)
        try client.shutdown()
    }
}

extension EventRecorder {
    func waitForDownload(_ document: DocumentDescriptor, timeout: Double, after: Int) -> LayerSyncError?? {
        wait(timeout: timeout, after: after) { event -> LayerSyncError?? in
            switch event {
            case .didFinishDownload(let d) where d === document: return .some(nil)
            case .didFailDownload(let d, let error) where d === document: return .some(error)
            default: return nil
            }
        }
    }
}
