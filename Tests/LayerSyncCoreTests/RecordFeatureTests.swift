import Foundation
import Synchronization
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel
@testable import LayerSyncStore
@testable import LayerSyncTransport

/// Comments, full-text search, history/rollback/deleted/restore, against the real server.
@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class RecordFeatureTests {
    let server: TestServer

    init() throws {
        server = try TestServer()
    }

    func makeClient(_ name: String) throws -> (SyncClient, EventRecorder) {
        let events = EventRecorder()
        var configuration = ClientConfiguration(serverURL: server.url, storagePath: server.storagePath(name))
        configuration.syncDelay = -1
        configuration.connectTimeout = 2
        let client = try SyncClient(configuration: configuration, eventHandler: events.handler)
        _ = events.waitForValidation()
        return (client, events)
    }

    func downloaded(_ client: SyncClient, _ events: EventRecorder, documentID: String = "doc") throws -> DocumentDescriptor {
        let document = try client.document(forJWT: try server.token(documentID: documentID, userID: "alice"))
        try document.download()
        if let error = try #require(events.waitForDownload(document)) { throw error }
        return document
    }

    func sync(_ events: EventRecorder, _ document: DocumentDescriptor) throws -> LayerSyncError? {
        let start = events.count
        try document.sync()
        return try #require(events.waitForSyncEnd(document, after: start))
    }

    /// Runs a one-shot operation and waits (bounded) for its completion.
    func completed(_ start: (@escaping DocumentDescriptor.OperationCompletion) throws(LayerSyncError) -> Void) throws -> Result<String, LayerSyncError> {
        let box = Mutex<Result<String, LayerSyncError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        try start { result in
            box.withLock { $0 = result }
            done.signal()
        }
        guard done.wait(timeout: .now() + 30) == .success, let result = box.withLock({ $0 }) else {
            throw TestFailure("the operation did not complete")
        }
        return result
    }

    func id(_ json: String) throws -> String { try #require(try JSONValue.parse(json)["id"]?.stringValue) }

    @Test func commentsBelongToARootAndDieWithIt() throws {
        try server.upload(documentID: "doc")
        let (client, events) = try makeClient("a")
        let document = try downloaded(client, events)
        let root = try id(try document.createAnnotation(json: ##"{"type":"pspdfkit/markup/highlight","pageIndex":0,"bbox":[1,2,3,4],"rects":[[1,2,3,4]],"color":"#ffff00"}"##))
        let first = try document.createComment(rootID: root, json: #"{"pageIndex":0,"text":{"format":"plain","value":"first"},"createdAt":"2025-01-01T00:00:00Z"}"#)
        let second = try document.createComment(rootID: root, json: #"{"pageIndex":0,"text":{"format":"plain","value":"second"},"createdAt":"2025-01-02T00:00:00Z"}"#)
        #expect(try JSONValue.parse(first)["type"] == .string("pspdfkit/comment"))
        #expect(try JSONValue.parse(first)["rootId"] == .string(root))
        #expect(try document.listComments(rootID: root) == "[\(first),\(second)]")
        for (json, code) in [(#"{"type":"pspdfkit/note"}"#, ErrorCode.invalidJSONStructure), (#"{"rootId":"other"}"#, .invalidArgument)] {
            #expect(throws: LayerSyncError.self) { _ = try document.createComment(rootID: root, json: json) }
            do { _ = try document.createComment(rootID: root, json: json) } catch { #expect(error.code == code) }
        }
        do {
            _ = try document.createComment(rootID: "missing", json: "{}")
            Issue.record("a comment on a missing root was accepted")
        } catch {
            #expect(error.code == .noSuchAnnotation)
        }
        #expect(try sync(events, document) == nil)
        #expect(try server.serverAnnotations(documentID: "doc")[try id(second)]?["rootId"] == .string(root))
        try document.deleteAnnotation(id: root)
        #expect(try sync(events, document) == nil)
        let remote = try server.serverAnnotations(documentID: "doc")
        let firstID = try id(first), secondID = try id(second)
        #expect(remote[root] == nil && remote[firstID] == nil && remote[secondID] == nil)
        do {
            _ = try document.listComments(rootID: root)
            Issue.record("comments of a deleted root listed")
        } catch {
            #expect(error.code == .noSuchAnnotation)
        }
        try client.shutdown()
    }

    @Test func fullTextSearchFindsWordsCaseAndDiacriticsInsensitive() throws {
        try server.upload(documentID: "doc")
        let (client, events) = try makeClient("a")
        let document = try downloaded(client, events)
        let cafe = try id(try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment","note":"Meet at the Café Müller"}"#))
        let budget = try id(try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"icon":"comment","text":{"value":"Budget review: \"quoted\""}}"#))
        func ids(_ query: String) throws -> [String] {
            try (JSONValue.parse(try document.searchAnnotations(query: query)).arrayValue ?? []).compactMap { $0["id"]?.stringValue }
        }
        #expect(try ids("cafe muller") == [cafe])
        #expect(try ids("CAF") == [cafe])
        #expect(try ids("budg \"quoted") == [budget])
        #expect(try ids("nothing-like-this").isEmpty)
        _ = try document.updateAnnotation(json: #"{"id":"\#(cafe)","type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment","note":"moved to the office"}"#)
        #expect(try ids("cafe").isEmpty)
        #expect(try ids("office") == [cafe])
        try document.deleteAnnotation(id: budget)
        #expect(try ids("budget").isEmpty)
        for query in ["   ", "!!!", "-- ?? \"\""] {  // no letters or digits: no words (header: INVALID_ARGUMENT)
            do {
                _ = try document.searchAnnotations(query: query)
                Issue.record("the query '\(query)' without words was accepted")
            } catch {
                #expect(error.code == .invalidArgument)
            }
        }
        #expect(try ids("office !!!") == [cafe])  // pieces without words are ignored next to words
        // The limit (header: "0 means 100", negative INVALID_ARGUMENT) is the core's rule.
        for _ in 0..<DocumentDescriptor.defaultSearchLimit { _ = try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"icon":"comment","text":{"format":"plain","value":""},"note":"many"}"#) }
        func count(_ limit: Int64) throws -> Int { try JSONValue.parse(try document.searchAnnotations(query: "many", limit: limit)).arrayValue?.count ?? -1 }
        #expect(try count(0) == Int(DocumentDescriptor.defaultSearchLimit))
        #expect(try count(3) == 3)
        do {
            _ = try document.searchAnnotations(query: "many", limit: -1)
            Issue.record("a negative search limit was accepted")
        } catch {
            #expect(error.code == .invalidArgument)
        }
        try client.shutdown()
    }

    @Test func historyRollbackDeletedListAndRestoreGoThroughTheServer() throws {
        try server.upload(documentID: "doc")
        let (client, events) = try makeClient("a")
        let document = try downloaded(client, events)
        let record = try id(try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment","note":"v1"}"#))
        #expect(try sync(events, document) == nil)
        _ = try document.updateAnnotation(json: #"{"id":"\#(record)","type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment","note":"v2"}"#)
        #expect(try sync(events, document) == nil)
        let history = try JSONValue.parse(try completed { completion throws(LayerSyncError) in
            try document.annotationHistory(id: record, completion: completion)
        }.get()).arrayValue ?? []
        #expect(history.map { $0["content"]?["note"] } == [.string("v2"), .string("v1")])
        let first = try #require(history.last?["revision"]?.int64Value)

        let rolledBack = try completed { completion throws(LayerSyncError) in
            try document.rollbackAnnotation(id: record, revision: first, completion: completion)
        }.get()
        #expect(try JSONValue.parse(rolledBack)["note"] == .string("v1"))
        #expect(try JSONValue.parse(try document.annotation(id: record))["note"] == .string("v1"))
        #expect(try server.serverAnnotations(documentID: "doc")[record]?["note"] == .string("v1"))

        // Another client changes it: a rollback based on the stale revision is refused (first writer wins).
        let (other, otherEvents) = try makeClient("b")
        let otherDocument = try downloaded(other, otherEvents)
        _ = try otherDocument.updateAnnotation(json: #"{"id":"\#(record)","type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment","note":"other"}"#)
        #expect(try sync(otherEvents, otherDocument) == nil)
        let stale = try completed { completion throws(LayerSyncError) in
            try document.rollbackAnnotation(id: record, revision: first, completion: completion)
        }
        #expect(throws: LayerSyncError.self) { try stale.get() }
        if case .failure(let error) = stale { #expect(error.code == .conflict && error.httpStatus == 409) }

        // Deleted list and restore.
        #expect(try sync(events, document) == nil)
        try document.deleteAnnotation(id: record)
        #expect(try sync(events, document) == nil)
        let deleted = try JSONValue.parse(try completed { completion throws(LayerSyncError) in
            try document.listDeletedAnnotations(completion: completion)
        }.get()).arrayValue ?? []
        let entry = try #require(deleted.first { $0["id"]?.stringValue == record })
        #expect(entry["last_content"]?["note"] == .string("other"))
        let restored = try completed { completion throws(LayerSyncError) in
            try document.restoreAnnotation(id: record, completion: completion)
        }.get()
        #expect(try JSONValue.parse(restored)["note"] == .string("other"))
        #expect(try JSONValue.parse(try document.annotation(id: record))["note"] == .string("other"))
        #expect(events.all.contains { if case .didReceiveChanges(_, let changes) = $0 { return changes.created.contains(record) }; return false })
        // Restoring a live record is a conflict; an unknown one is NO_SUCH_ANNOTATION.
        let live = try completed { completion throws(LayerSyncError) in try document.restoreAnnotation(id: record, completion: completion) }
        if case .failure(let error) = live { #expect(error.code == .conflict) } else { Issue.record("restored a live record") }
        let unknown = try completed { completion throws(LayerSyncError) in try document.annotationHistory(id: "nope", completion: completion) }
        if case .failure(let error) = unknown { #expect(error.code == .noSuchAnnotation) } else { Issue.record("history of nothing") }
        try client.shutdown()
        try other.shutdown()
    }
}

@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class AttachmentTests {
    let server: TestServer
    let helper: RecordFeatureTests

    init() throws {
        helper = try RecordFeatureTests()
        server = helper.server
    }

    @Test func sha256MatchesTheStandardVectors() {
        #expect(SHA256.hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256.hex([UInt8]()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(Array(String(repeating: "a", count: 1_000).utf8))
                == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3")
    }

    /// The streamed PDF download hashes the bytes as they arrive, in pieces of any size.
    @Test func sha256FedInPiecesEqualsTheDigestOfTheWhole() {
        let bytes = (0..<1_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        for pieces in [[1_000], [1, 999], [63, 1, 64, 872], [55, 1, 8, 936], [64, 64, 872], Array(repeating: 1, count: 1_000)] {
            var hasher = SHA256.Hasher()
            var offset = 0
            for count in pieces {
                hasher.update(Array(bytes[offset..<offset + count]))
                offset += count
            }
            #expect(hasher.finalize() == SHA256.hex(bytes), "pieces \(pieces.prefix(4))")
        }
        #expect(SHA256.Hasher().finalize() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let digest = SHA256.hex(bytes)
        #expect(SyncServer.strongSHA256(etag: "\"\(digest)\"") == digest)
        #expect(SyncServer.strongSHA256(etag: "W/\"\(digest)\"") == nil)
        #expect(SyncServer.strongSHA256(etag: "\"abc\"") == nil)
        #expect(SyncServer.strongSHA256(etag: nil) == nil)
    }

    @Test func attachmentsAreUploadedBeforeTheirRecordAndDownloadedLazily() throws {
        try server.upload(documentID: "doc")
        let (a, aEvents) = try helper.makeClient("a")
        let docA = try helper.downloaded(a, aEvents)
        let image: [UInt8] = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let attachment = try docA.addAttachment(bytes: image, contentType: "image/png")
        #expect(attachment == SHA256.hex(image))
        #expect(try docA.addAttachment(bytes: image, contentType: "image/png") == attachment)  // idempotent
        #expect(try docA.attachmentData(id: attachment).bytes == image)
        let record = try helper.id(try docA.createAnnotation(
            json: #"{"type":"pspdfkit/image","pageIndex":0,"bbox":[1,2,3,4],"imageAttachmentId":"\#(attachment)","contentType":"image/png"}"#))
        #expect(try helper.sync(aEvents, docA) == nil)
        // On the server, under its hash.
        let token = try server.token(documentID: "doc")
        let session = HTTPSession(connectTimeoutSeconds: 2)
        var request = HTTPRequest(url: server.url + "/sync/v1/documents/doc/attachments/\(attachment)")
        request.headers = ["Authorization: Bearer \(token)"]
        let response = try session.perform(request, cancellation: TransferCancellation())
        #expect(response.status == 200 && response.body == image)
        #expect(try server.serverAnnotations(documentID: "doc")[record] != nil)

        // Another client has the record but not the bytes until it asks.
        let (b, bEvents) = try helper.makeClient("b")
        let docB = try helper.downloaded(b, bEvents)
        do {
            _ = try docB.attachmentData(id: attachment)
            Issue.record("an attachment that was never downloaded was returned")
        } catch {
            #expect(error.code == .attachmentNotLoaded && error.attachmentID == attachment)
        }
        let downloaded = try helper.completed { completion throws(LayerSyncError) in
            try docB.downloadAttachment(id: attachment, completion: completion)
        }.get()
        #expect(try JSONValue.parse(downloaded)["size_bytes"] == .integer(Int64(image.count)))
        let data = try docB.attachmentData(id: attachment)
        #expect(data.bytes == image && data.contentType == "image/png")

        let unknown = String(repeating: "ab", count: 32)
        do {
            _ = try docB.attachmentData(id: unknown)
            Issue.record("an unknown attachment was returned")
        } catch {
            #expect(error.code == .noSuchAttachment)
        }
        let missing = try helper.completed { completion throws(LayerSyncError) in
            try docB.downloadAttachment(id: unknown, completion: completion)
        }
        if case .failure(let error) = missing { #expect(error.code == .noSuchAttachment) } else { Issue.record("downloaded nothing") }
        #expect(throws: LayerSyncError.self) { try docB.attachmentData(id: "not-a-hash") }

        // A file that cannot be written: COULD_NOT_CREATE_ATTACHMENT (a directory in the way
        // of the temporary file stops root too).
        let blocked: [UInt8] = Array("blocked".utf8)
        try FileManager.default.createDirectory(atPath: docA.attachmentsDirectory + "/" + SHA256.hex(blocked) + ".part",
                                                withIntermediateDirectories: true)
        do {
            _ = try docA.addAttachment(bytes: blocked, contentType: "text/plain")
            Issue.record("an attachment whose file cannot be written was accepted")
        } catch {
            #expect(error.code == .couldNotCreateAttachment && error.attachmentID == SHA256.hex(blocked))
        }
        try a.shutdown()
        try b.shutdown()
    }

    @Test func anAttachmentWaitingForUploadIsReferencedAndUnsynced() throws {
        try server.upload(documentID: "doc")
        let (client, events) = try helper.makeClient("a")
        let document = try helper.downloaded(client, events)
        #expect(document.state == .clean && !document.hasUnsyncedChanges)
        let bytes = Array("queued for upload".utf8)
        let attachment = try document.addAttachment(bytes: bytes, contentType: "text/plain")
        // Queued upload = unsynced local change (Instant: dirty until the server has it).
        #expect(document.state == .dirty && document.hasUnsyncedChanges)
        #expect(try JSONValue.parse(client.localDocumentsJSON())["doc"]?.arrayValue?.first?["has_unsynced_changes"] == .bool(true))
        // A cleanup before any record references it keeps it.
        try client.removeUnreferencedCacheEntries()
        #expect(try document.attachmentData(id: attachment).bytes == bytes)
        let cache = try JSONValue.parse(client.cacheEntriesJSON()).arrayValue ?? []
        #expect(cache.contains { $0["attachment_id"] == .string(attachment) && $0["referenced"] == .bool(true) })
        let record = try helper.id(try document.createAnnotation(
            json: #"{"type":"pspdfkit/image","pageIndex":0,"bbox":[1,2,3,4],"imageAttachmentId":"\#(attachment)"}"#))  // an image record's contentType is image/*
        #expect(try helper.sync(events, document) == nil)
        #expect(document.state == .clean && !document.hasUnsyncedChanges)
        #expect(try server.serverAnnotations(documentID: "doc")[record] != nil)
        try client.shutdown()
    }

    @Test func aVanishedAttachmentIsDroppedAloneAndNeverBlocksTheQueue() throws {
        try server.upload(documentID: "doc")
        let (client, events) = try helper.makeClient("a")
        let document = try helper.downloaded(client, events)
        let attachment = try document.addAttachment(bytes: Array("soon gone".utf8), contentType: "text/plain")
        try FileManager.default.removeItem(atPath: document.attachmentsDirectory + "/" + attachment)  // behind the engine's back
        let record = try helper.id(try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"}"#))
        let start = events.count
        #expect(try helper.sync(events, document) == nil)
        let rejected = events.wait(after: start) { event -> [RejectedChange]? in
            if case .didRejectChanges(let d, let changes) = event, d === document { return changes }
            return nil
        }
        #expect(rejected?.map(\.recordID) == [attachment])
        #expect(rejected?.first?.reason == "attachment_missing" && rejected?.first?.code == .couldNotReadFromDiskCache)
        #expect(try server.serverAnnotations(documentID: "doc")[record] != nil)
        #expect(document.state == .clean)
        #expect(try helper.sync(events, document) == nil)  // and every later sync works
        try client.shutdown()
    }
}

@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class ContentMigrationTests {
    let helper: RecordFeatureTests

    init() throws { helper = try RecordFeatureTests() }

    @Test func anOlderContentFormatIsMigratedOnRequestWithEveryStateReportedOnce() throws {
        try helper.server.upload(documentID: "doc")
        let (client, events) = try helper.makeClient("a")
        let document = try helper.downloaded(client, events)
        // Make the store look written by a library that stored Instant JSON v1.
        try document.store.withDatabase { db throws(LayerSyncError) in
            try db.query("INSERT INTO records(id, content) VALUES ('old-1', ?)",
                         [.text(#"{"id":"old-1","v":1,"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"icon":"comment","text":"plain v1 text"}"#)])
            try db.query("INSERT INTO pending_changes(change_id, record_id, op, content) VALUES ('c-old', 'old-1', 'create', ?)",
                         [.text(#"{"id":"old-1","v":1,"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"icon":"comment","text":"plain v1 text"}"#)])
            try LayerStore.setMeta(db, "content_version", "1")
            document.store.invalidateCache()  // written behind the store's API
        }
        #expect(document.state == .needsContentMigration)
        for call in [{ _ = try document.listAnnotations(filterJSON: nil) }, { try document.sync() },
                     { _ = try document.createAnnotation(json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"text":{"format":"plain","value":""},"icon":"comment"}"#) }] as [() throws -> Void] {
            do {
                try call()
                Issue.record("a call succeeded on a store that needs content migration")
            } catch let error as LayerSyncError {
                #expect(error.code == .contentMigrationNeeded)
            }
        }
        let observed = Mutex<[ErrorCode]>([])
        DocumentDescriptor.contentMigrationWillRun.withLock { hook in
            hook = { running in
                #expect(running.state == .migratingContent)
                do throws(LayerSyncError) { _ = try running.listAnnotations(filterJSON: nil) } catch {
                    observed.withLock { $0.append(error.code) }
                }
                do throws(LayerSyncError) { try running.attemptContentMigration() } catch {
                    observed.withLock { $0.append(error.code) }
                }
            }
        }
        defer { DocumentDescriptor.contentMigrationWillRun.withLock { $0 = nil } }
        let start = events.count
        try document.attemptContentMigration()
        #expect(observed.withLock { $0 } == [.performingContentMigration, .performingContentMigration])
        #expect(document.state == .dirty)
        let migrated = try JSONValue.parse(try document.annotation(id: "old-1"))
        #expect(migrated["v"] == .integer(2))
        #expect(migrated["text"]?["value"] == .string("plain v1 text") && migrated["text"]?["format"] == .string("plain"))
        try document.attemptContentMigration()  // nothing left to do
        #expect(try helper.sync(events, document) == nil)
        #expect(try helper.server.serverAnnotations(documentID: "doc")["old-1"]?["text"]?["value"] == .string("plain v1 text"))
        try client.shutdown()
        let states = events.all[start...].compactMap { event -> DocumentState? in
            if case .didChangeSyncState(let d, let state) = event, d === document { return state }
            return nil
        }
        #expect(Array(states.prefix(2)) == [.migratingContent, .dirty], "\(states)")
        for (previous, next) in zip(states, states.dropFirst()) { #expect(previous != next, "\(states)") }
    }
}
