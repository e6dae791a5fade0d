import Foundation
import Synchronization
import Testing
@testable import LayerSyncCore
@testable import LayerSyncModel

/// ``ClientConfiguration/reachabilityHint`` against the real server behind a ``FaultProxy``:
/// `.dropResponse` cuts each connection before the answer (a transport failure: no HTTP
/// answer), and the proxy's request log counts every request the client attempted.
/// The rules are in docs/threading.md §8; the C test `c.network_hint` counts connections.
@Suite(.serialized, .enabled(if: TestServer.isAvailable, "layersync-server not installed in .venv (run scripts/setup.sh)"))
final class NetworkHintTests {
    let server: TestServer
    let proxy: FaultProxy

    init() throws {
        server = try TestServer()
        proxy = try FaultProxy(upstreamPort: server.port)
    }

    deinit { proxy.stop() }

    /// A host hint: answers `answer`, records each call and whether it ran on the client's event queue.
    final class Hint: Sendable {
        let answer = Atomic<Bool>(true)
        private let state = Mutex<(calls: Int, trueAnswers: Int, offQueue: Int)>((0, 0, 0))
        let client = Mutex<SyncClient?>(nil)
        /// While set, the next call signals `entered` and waits for `release` before answering.
        let hold = Mutex<(entered: DispatchSemaphore, release: DispatchSemaphore)?>(nil)

        var calls: Int { state.withLock { $0.calls } }
        var trueAnswers: Int { state.withLock { $0.trueAnswers } }
        /// Calls that did not run on the client's event queue.
        var callsOffTheEventQueue: Int { state.withLock { $0.offQueue } }

        var function: @Sendable () -> Bool {
            { [self] in
                if let held = hold.withLock({ held in defer { held = nil }; return held }) {
                    held.entered.signal()
                    held.release.wait()
                }
                let onQueue = client.withLock { $0?.isOnEventQueue } ?? false
                let reply = answer.load(ordering: .acquiring)
                state.withLock { state in
                    state.calls += 1
                    if reply { state.trueAnswers += 1 }
                    if !onQueue { state.offQueue += 1 }
                }
                return reply
            }
        }

        /// Makes the next call wait: it signals the first semaphore returned when it begins and
        /// answers once the test signals the second.
        func holdNextCall() -> (entered: DispatchSemaphore, release: DispatchSemaphore) {
            let held = (entered: DispatchSemaphore(value: 0), release: DispatchSemaphore(value: 0))
            hold.withLock { $0 = held }
            return held
        }

        /// Waits (at most `timeout` seconds) until `condition` holds.
        func wait(timeout: Double = 30, _ condition: (Hint) -> Bool) -> Bool {
            let deadline = Date().addingTimeInterval(timeout)
            while !condition(self) {
                if Date() >= deadline { return false }
                usleep(20_000)
            }
            return true
        }
    }

    struct Client {
        let client: SyncClient
        let events: EventRecorder
        let document: DocumentDescriptor
    }

    /// A client through the proxy (with `hint`, if given) and a downloaded document.
    func makeClient(_ name: String, hint: Hint?) throws -> Client {
        let events = EventRecorder()
        var configuration = ClientConfiguration(serverURL: proxy.url, storagePath: server.storagePath(name))
        configuration.syncDelay = -1
        configuration.longPollWait = 5
        configuration.connectTimeout = 2
        configuration.reachabilityHint = hint?.function
        let client = try SyncClient(configuration: configuration, eventHandler: events.handler)
        hint?.client.withLock { $0 = client }
        _ = try #require(events.waitForValidation())
        let document = try client.document(forJWT: try server.token(documentID: "doc", userID: "alice"))
        try document.download()
        let failure = try #require(events.waitForDownload(document))
        if let failure { throw failure }
        return Client(client: client, events: events, document: document)
    }

    func sync(_ client: Client) throws -> LayerSyncError? {
        let start = client.events.count
        try client.document.sync()
        return try #require(client.events.waitForSyncEnd(client.document, after: start), "sync did not end")
    }

    func note(_ client: Client, _ text: String) throws -> String {
        let created = try JSONValue.parse(try client.document.createAnnotation(
            json: #"{"type":"pspdfkit/note","pageIndex":0,"bbox":[1,2,3,4],"icon":"comment","text":{"format":"plain","value":"\#(text)"}}"#))
        return try #require(created["id"]?.stringValue)
    }

    /// Cuts every request before its answer (`down`) or forwards it.
    func network(down: Bool) {
        proxy.setRule { _ in down ? .dropResponse : .forward }
    }

    /// Whether a failure came from the availability guard (no request made) rather than the network.
    static func noRequestMade(_ error: LayerSyncError?) -> Bool {
        error?.code == .requestFailed && error?.message.contains("no request was made") == true
    }

    @Test func hintFalseStopsRequestsUntilItSaysTrue() throws {
        try server.upload(documentID: "doc")
        let hint = Hint()
        let a = try makeClient("a", hint: hint)
        #expect(hint.calls == 0)  // every request was answered: never asked

        network(down: true)
        hint.answer.store(false, ordering: .releasing)
        let id = try note(a, "offline")
        let before = proxy.requestLines.count
        let failure = try sync(a)
        #expect(failure?.code == .requestFailed && failure?.httpStatus == nil && !Self.noRequestMade(failure))
        #expect(proxy.requestLines.count > before)
        // Asked before the failure was delivered (same FIFO), on the event queue.
        #expect(hint.calls >= 1)
        // While it says false: fail fast, no request, pending, asked again periodically.
        let calls = hint.calls
        let attempted = proxy.requestLines.count
        #expect(Self.noRequestMade(try sync(a)))
        #expect(a.document.hasUnsyncedChanges)
        #expect(hint.wait { $0.calls > calls })
        #expect(proxy.requestLines.count == attempted)

        network(down: false)
        let start = a.events.count
        hint.answer.store(true, ordering: .releasing)
        // The failed sync resumes by itself once the hint says true.
        let resumed = try #require(a.events.waitForSyncEnd(a.document, after: start))
        #expect(resumed == nil, "\(String(describing: resumed))")
        #expect(!a.document.hasUnsyncedChanges)
        #expect(try server.serverAnnotations(documentID: "doc")[id] != nil)
        #expect(hint.callsOffTheEventQueue == 0)
        try a.client.shutdown()
    }

    @Test func explicitCallsWinOverTheHint() throws {
        try server.upload(documentID: "doc")
        let hint = Hint()
        let a = try makeClient("a", hint: hint)

        // Explicit false holds although the hint answers true.
        network(down: true)
        hint.answer.store(false, ordering: .releasing)
        _ = try note(a, "explicit false")
        #expect(try sync(a)?.code == .requestFailed)
        a.client.setNetworkAvailable(false)
        network(down: false)
        let trueAnswers = hint.trueAnswers
        hint.answer.store(true, ordering: .releasing)
        #expect(hint.wait { $0.trueAnswers > trueAnswers })  // the periodic ask
        let attempted = proxy.requestLines.count
        let failure = try sync(a)
        #expect(Self.noRequestMade(failure) && failure?.message.contains("setNetworkAvailable(false)") == true)
        #expect(Self.noRequestMade(try sync(a)))
        #expect(proxy.requestLines.count == attempted)
        #expect(a.document.hasUnsyncedChanges)
        var start = a.events.count
        a.client.setNetworkAvailable(true)
        let first = try #require(a.events.waitForSyncEnd(a.document, after: start))
        #expect(first == nil, "\(String(describing: first))")

        // Explicit true clears the hint's last false, which still answers false.
        network(down: true)
        hint.answer.store(false, ordering: .releasing)
        let id = try note(a, "explicit true")
        #expect(try sync(a)?.code == .requestFailed)
        #expect(Self.noRequestMade(try sync(a)))
        network(down: false)
        start = a.events.count
        a.client.setNetworkAvailable(true)
        let resumed = try #require(a.events.waitForSyncEnd(a.document, after: start))
        #expect(resumed == nil, "\(String(describing: resumed))")
        #expect(try server.serverAnnotations(documentID: "doc")[id] != nil)
        #expect(hint.callsOffTheEventQueue == 0)
        try a.client.shutdown()
    }

    /// The host's explicit `true` is fresher than any ask of the hint queued before it
    /// (docs/threading.md §8 rule 5): here one ask is running (its answer comes after the call)
    /// and one is queued behind it, both for failures before the call. Neither may take the
    /// network away again; the queued one is not even asked. (Without this, `c.network_hint`
    /// C failed now and then: a long-poll retry failed just before the explicit true, and the
    /// hint's late false held the client offline for good while the hint kept saying false.)
    @Test func asksForFailuresBeforeAnExplicitTrueCannotUndoIt() throws {
        try server.upload(documentID: "doc")
        let hint = Hint()
        let a = try makeClient("a", hint: hint)
        network(down: true)
        hint.answer.store(false, ordering: .releasing)
        let (entered, release) = hint.holdNextCall()
        let id = try note(a, "explicit true while the hint answers")
        let start = a.events.count

        try a.document.sync()
        #expect(entered.wait(timeout: .now() + 30) == .success, "the failed request did not ask the hint")
        // A second failure while the first ask runs (the event queue is held in the hint):
        // it queues a second ask before its own didFailSync.
        try a.document.sync()
        a.document.waitUntilIdle()
        network(down: false)
        a.client.setNetworkAvailable(true)
        release.signal()  // the first ask answers false, after the explicit true

        let ends = a.events.wait(after: start) { _ -> [LayerSyncError?]? in
            let ends = a.events.all[start...].compactMap { event -> LayerSyncError?? in
                if case .didFinishSync(let d) = event, d === a.document { return .some(nil) }
                if case .didFailSync(let d, let error) = event, d === a.document { return .some(error) }
                return nil
            }
            return ends.count >= 2 ? ends : nil
        }
        let failures = try #require(ends, "the two syncs did not end")
        for failure in failures {
            #expect(failure?.code == .requestFailed && !Self.noRequestMade(failure), "\(String(describing: failure))")
        }
        #expect(hint.calls == 1, "the ask queued before the explicit true called the hint")
        #expect(a.client.context.server.isNetworkAvailable, "a stale false answer took the network away")
        let after = try sync(a)
        #expect(after == nil, "\(String(describing: after))")
        #expect(try server.serverAnnotations(documentID: "doc")[id] != nil)

        // The next failure after the explicit word asks the hint again, and its false holds.
        network(down: true)
        _ = try note(a, "asked again")
        #expect(try sync(a)?.code == .requestFailed)
        #expect(hint.calls == 2)
        #expect(Self.noRequestMade(try sync(a)))
        try a.client.shutdown()
    }

    /// A request started before the host's explicit true whose transport failure is seen only
    /// after it (in flight across the call: a timeout, a long-poll of the outage) failed for the
    /// superseded word too: the hint is not asked for it and the network stays usable (rule 5).
    @Test func aRequestInFlightAcrossAnExplicitTrueCannotUndoIt() throws {
        try server.upload(documentID: "doc")
        let hint = Hint()
        let a = try makeClient("a", hint: hint)
        hint.answer.store(false, ordering: .releasing)  // a hint that lags behind the host
        let entered = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        // POST #1 waits in the proxy, then is cut; #2 (libcurl's own retry on a fresh
        // connection, inside the same request) is cut too; later ones pass.
        let posts = Atomic<Int>(0)
        proxy.setRule { head in
            guard head.hasPrefix("POST") else { return .forward }
            let n = posts.add(1, ordering: .acquiringAndReleasing).newValue
            if n == 1 { entered.signal(); _ = release.wait(timeout: .now() + 20) }
            return n <= 2 ? .dropResponse : .forward
        }
        let id = try note(a, "in flight across the explicit true")
        let start = a.events.count
        try a.document.sync()
        #expect(entered.wait(timeout: .now() + 30) == .success, "the sync request did not reach the proxy")
        a.client.setNetworkAvailable(true)
        release.signal()  // the request started before the call fails after it
        let end = try #require(a.events.waitForSyncEnd(a.document, after: start))
        #expect(end?.code == .requestFailed && !Self.noRequestMade(end), "\(String(describing: end))")
        #expect(hint.calls == 0, "a failure of a request started before the explicit true asked the hint")
        #expect(a.client.context.server.isNetworkAvailable, "a request started before the explicit true took the network away")
        let after = try sync(a)
        #expect(after == nil, "\(String(describing: after))")
        #expect(try server.serverAnnotations(documentID: "doc")[id] != nil)
        try a.client.shutdown()
    }

    /// An answer dropped because the host spoke during the call (here: an explicit false) leaves
    /// the hint's last false in place, and the hint is still asked again periodically (rule 1).
    @Test func aDroppedAnswerKeepsThePeriodicAsk() throws {
        try server.upload(documentID: "doc")
        let hint = Hint()
        let a = try makeClient("a", hint: hint)
        network(down: true)
        hint.answer.store(false, ordering: .releasing)
        _ = try note(a, "dropped answer")
        #expect(try sync(a)?.code == .requestFailed)
        a.client.setNetworkAvailable(false)
        let (entered, release) = hint.holdNextCall()
        #expect(entered.wait(timeout: .now() + 30) == .success, "no periodic ask")
        a.client.setNetworkAvailable(false)  // the host speaks while the hint answers
        hint.answer.store(true, ordering: .releasing)
        release.signal()
        // Had the dropped true been applied, the flag would be clear and nothing asked again.
        #expect(hint.wait { $0.trueAnswers >= 2 }, "the periodic ask stopped after a dropped answer")
        let server = a.client.context.server
        #expect(hint.wait { _ in !server.networkAvailability.hintSaysOffline }, "the periodic true was not applied")
        network(down: false)
        let start = a.events.count
        a.client.setNetworkAvailable(true)
        let resumed = try #require(a.events.waitForSyncEnd(a.document, after: start))
        #expect(resumed == nil, "\(String(describing: resumed))")
        try a.client.shutdown()
    }

    @Test func withoutAHintEverySyncTriesTheNetwork() throws {
        try server.upload(documentID: "doc")
        let a = try makeClient("a", hint: nil)
        network(down: true)
        _ = try note(a, "no hint")
        for _ in 0..<3 {
            let before = proxy.requestLines.count
            let failure = try sync(a)
            #expect(failure?.code == .requestFailed && !Self.noRequestMade(failure))
            #expect(proxy.requestLines.count > before)
        }
        network(down: false)
        let after = try sync(a)
        #expect(after == nil, "\(String(describing: after))")
        try a.client.shutdown()
    }

    @Test func noHintCallAfterShutdown() throws {
        try server.upload(documentID: "doc")
        let hint = Hint()
        let a = try makeClient("a", hint: hint)
        network(down: true)
        hint.answer.store(false, ordering: .releasing)
        _ = try note(a, "shutdown")
        #expect(try sync(a)?.code == .requestFailed)
        try a.client.shutdown()
        let calls = hint.calls
        // The false answer scheduled a recheck; it must not reach the hint any more.
        Thread.sleep(forTimeInterval: SyncClient.networkHintRecheckSeconds + 1)
        #expect(hint.calls == calls)
    }
}
