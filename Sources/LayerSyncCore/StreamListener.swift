import Dispatch
import LayerSyncModel
import LayerSyncTransport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How a client listens for server changes (``SyncClient/listeningTransport``).
public enum ListeningTransport: Sendable, Equatable {
    /// One change stream (protocol version 2) carries every layer the client listens on.
    case stream
    /// Each listened layer long-polls on its own (protocol version 1): the server does not
    /// offer the stream, or something between client and server buffers it. `reason` says which.
    case longPoll(reason: String)
}

/// The one listener of a client (ARCHITECTURE.md §4): one thread that holds the client's one
/// change stream
/// (``SyncServer/startStream(path:jwt:replaces:stallSeconds:group:cancellation:watchdog:onMessage:completion:)``)
/// for every descriptor whose ``DocumentDescriptor/startListening()`` was called, driven by an
/// ``HTTPTransferGroup``, and one serial queue for the short requests that add and remove its
/// subscriptions.
///
/// One stream for all layers, whatever users their JWTs name: the server gives authority over a
/// stream to its key (`stream_key` in its `hello`, sent on every subscribe and unsubscribe), not
/// to the user who opened it, and each subscription is authorised by its own layer's JWT
/// (protocol.md "Protocol version 2"). The stream is opened with any listening layer's JWT and
/// closes when the last layer stops listening; a reauthentication (with a JWT of any user)
/// subscribes the layer again on it, which replaces its subscription.
///
/// What an event does to a layer runs on that layer's work queue, by the code the long-poll
/// uses (``DocumentDescriptor/applyStreamedPage(_:since:generation:)``). The stream reconnects
/// with capped exponential backoff and full jitter, and every subscription resumes from its
/// layer's committed cursor. Each new stream names the one before it with its key (`replaces`):
/// the server closes that one if it still holds it (a path that takes bytes and delivers none).
///
/// Buffering (protocol.md "What the client does"): the `hello` is due when the request is sent,
/// a `subscribed` event when its subscription is answered. An event overdue for
/// ``probeAfterSeconds`` with nothing arriving on the stream starts a probe (`GET /sync/v1/info`
/// on its own connection). The stream is buffered when the event is still missing
/// ``eventDeadlineSeconds`` after it was due and ``probeGraceSeconds`` after the probe was
/// answered: the server answers, its stream does not arrive. A probe that gets no answer means
/// the network is out (a stall, not buffering): the stream is opened again after a backoff.
/// Buffering, a server that does not advertise the stream, or a 404 to it move all listening to
/// per-layer long-polls (logged on stderr, ``SyncClient/listeningTransport``; no stream is held
/// then); the stream is tried again after ``streamRetrySeconds`` (doubled per failed try) and
/// takes the layers back when it works. A layer whose subscription the open stream refuses
/// (429: the server's `max_subscriptions` per stream; 404 while the stream is still open and the
/// layer exists: the request reached another server process than the one holding the stream, or
/// lost its key on the way) long-polls on its own (logged,
/// ``DocumentDescriptor/listeningTransport``) and is subscribed again after
/// ``subscriptionRetrySeconds`` (doubled), at once when another layer's subscription ends, or
/// on the next stream (its `hello`). A 404 from a stream that has ended meanwhile refuses
/// nothing: the next stream subscribes the layer.
final class StreamListener: Sendable {
    /// Seconds after it is due within which an event must arrive on the stream.
    static let eventDeadlineSeconds = 5.0
    /// Seconds an event may be overdue, with nothing arriving, before the probe is sent.
    static let probeAfterSeconds = 3.0
    /// Seconds the event may still take after the probe was answered (after a network outage
    /// the probe's answer and the held stream come back together).
    static let probeGraceSeconds = 2.0
    /// Seconds within which the probe must be answered for the network to count as working.
    static let probeTimeoutSeconds = 10.0
    /// First pause before trying the stream again after a fallback, and the longest.
    static let streamRetrySeconds = (first: 300.0, longest: 3600.0)
    /// First pause before subscribing again a layer the stream refused (429, 404), and the longest.
    static let subscriptionRetrySeconds = (first: 60.0, longest: 900.0)

    private struct Subscription {
        let descriptor: DocumentDescriptor
        /// The descriptor's listening generation this subscription serves (stale while the
        /// layer long-polls: moving back asks the descriptor for a new one).
        var generation: Int
        /// The stream it is subscribed on, with the token it was subscribed with.
        var subscribed: (streamID: String, token: String)?
        /// Why this layer long-polls on its own while the stream serves the others (the server
        /// refused its subscription), `nil` on the stream.
        var refusal: String?
        /// Refusals in a row (the retry's backoff).
        var refusals = 0
    }

    /// The probe of an overdue event (see the type's documentation).
    private struct Probe {
        let cancellation = TransferCancellation()
        let started: DispatchTime
        var answered: DispatchTime?
        var failed = false
    }

    /// How the stream's watchdog ended it.
    private enum Verdict {
        /// Events do not arrive while the server answers: fall back to long-polls.
        case buffered(String)
        /// The server does not answer at all: reopen after a backoff.
        case unreachable
    }

    /// A stream's id and key (its `hello`): what a subscription names it by.
    private typealias StreamHandle = (id: String, key: String?)

    private struct State {
        var subscriptions: [StreamLayer: Subscription] = [:]
        /// Aborts the running stream transfer (or the server info asked for before it); `nil`
        /// while none runs.
        var transfer: TransferCancellation?
        /// The current stream's id and key, from its `hello`.
        var stream: StreamHandle?
        /// The last `hello`'s, kept after its stream ended: the next stream names it (`replaces`)
        /// so the server closes it if it still holds it (a path that went silent).
        var lastStream: StreamHandle?
        /// Failures of the stream in a row (the backoff), and when the next may be opened.
        var failures = 0
        var retryAt = DispatchTime.now()
        /// Since when the current stream's `hello` is due (the request was sent), until it arrives.
        var helloDue: DispatchTime?
        var helloArmed = false
        /// Per layer: `subscribed` events the current stream owes (answers minus events;
        /// below zero when an event beat its answer) and since when.
        var acks: [StreamLayer: (owed: Int, due: DispatchTime)] = [:]
        /// Per layer: subscribe requests sent on the current stream whose `subscribed` event has
        /// not arrived (nor an answer that asks for none). While one is out, an `unsubscribed`
        /// event of the layer is about an earlier subscription (the server writes every event of
        /// a subscription after its `subscribed`): a JWT revoked or expired before a
        /// reauthentication subscribed the layer again must not end the new subscription.
        var unacknowledged: [StreamLayer: Int] = [:]
        /// Body bytes of the current stream at the last watchdog call.
        var bodyBytes = 0
        var probe: Probe?
        var verdict: Verdict?
        /// Why listening uses long-polls, while it does.
        var fallbackReason: String?
        /// Tries of the stream since the fallback (the retry's backoff), and when the next is due.
        var retries = 0
        var nextTry = DispatchTime.now()
        var loopRunning = false
        /// The stream's path and heartbeat period, once the server info said them (`nil`
        /// only while no stream runs).
        var path: String?
        var heartbeatSeconds = 15.0
        var shutDown = false

        /// Whether `streamID` is the current stream.
        func isCurrent(_ streamID: String) -> Bool { stream?.id == streamID }

        /// One subscribe request of `layer` on the current stream is settled (``unacknowledged``).
        mutating func settle(_ layer: StreamLayer) {
            guard let count = unacknowledged[layer] else { return }
            unacknowledged[layer] = count > 1 ? count - 1 : nil
        }
    }

    /// An unsubscribe request to send: the stream's path, id and key, the token subscribed with.
    private typealias Unsubscribe = (path: String, stream: StreamHandle, token: String)

    /// What the loop does next.
    private enum Step {
        case exit
        case open
        case drive(seconds: Double)
    }

    private let state = Mutex(State())
    private let loopQueue = DispatchQueue(label: "layersync.client.stream")
    private let controlQueue = DispatchQueue(label: "layersync.client.stream.control")
    private let connectTimeout: Double
    /// The running stream, driven by the loop's thread.
    private let streams: HTTPTransferGroup
    /// The server info asked for before a stream (on the loop's thread, while no stream runs).
    private let infoSession: HTTPSession
    private let controlSession: HTTPSession

    init(connectTimeout: Double) {
        self.connectTimeout = connectTimeout
        streams = HTTPTransferGroup(connectTimeoutSeconds: connectTimeout)
        infoSession = HTTPSession(connectTimeoutSeconds: connectTimeout)
        controlSession = HTTPSession(connectTimeoutSeconds: connectTimeout)
    }

    /// How listening works now: the stream, or long-polls after a fallback.
    var transport: ListeningTransport {
        state.withLock { $0.fallbackReason.map { .longPoll(reason: $0) } ?? .stream }
    }

    /// How `descriptor`'s layer is listened to: long-polls after a fallback or a refused subscription, else the stream.
    func transport(of descriptor: DocumentDescriptor) -> ListeningTransport {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        return state.withLock { state in
            if let reason = state.fallbackReason { return .longPoll(reason: reason) }
            guard let subscription = state.subscriptions[layer], subscription.descriptor === descriptor,
                  let refusal = subscription.refusal else { return .stream }
            return .longPoll(reason: refusal)
        }
    }

    // MARK: Subscriptions

    /// Adds the listening run `generation` of `descriptor` (replacing an earlier one of its
    /// layer) on the stream (opened when it is the first layer).
    /// - Returns: `false` when listening uses long-polls (the caller starts the descriptor's
    ///   loop; the stream takes it back when it works again).
    func add(_ descriptor: DocumentDescriptor, generation: Int) -> Bool {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        let (onStream, startLoop, stream) = state.withLock { state -> (Bool, Bool, StreamHandle?) in
            guard !state.shutDown else { return (false, false, nil) }
            state.subscriptions[layer] = Subscription(descriptor: descriptor, generation: generation)
            defer { state.loopRunning = true }
            return (state.fallbackReason == nil, !state.loopRunning, state.fallbackReason == nil ? state.stream : nil)
        }
        let context = descriptor.context
        if startLoop {
            loopQueue.async { [self] in run(context) }
        } else if let stream {
            subscribe(layer, on: stream.id, context: context)  // (replaces an earlier subscription of the layer)
        } else {
            streams.wakeUp()  // the loop opens the stream
        }
        return onStream
    }

    /// Removes `descriptor`'s subscription (stop listening): an unsubscribe request when it is
    /// subscribed (its place goes to a layer the server refused), or the stream closes when it
    /// was the last layer.
    func remove(_ descriptor: DocumentDescriptor) {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        let left = state.withLock { state -> Unsubscribe? in
            guard let subscription = state.subscriptions[layer], subscription.descriptor === descriptor else { return nil }
            state.subscriptions[layer] = nil
            return Self.leave(subscription, in: &state)
        }
        streams.wakeUp()  // the loop ends when no layer listens any more
        if let left { unsubscribe(left, layer, context: descriptor.context) }
    }

    /// Subscribes `descriptor`'s layer again from its cursor (after a reset, a re-base or a new
    /// token, of any user): on the same stream, where it replaces the layer's subscription.
    func resubscribe(_ descriptor: DocumentDescriptor) {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        let streamID = state.withLock { state -> String? in
            guard let old = state.subscriptions[layer], old.descriptor === descriptor else { return nil }
            if old.refusal == nil { state.subscriptions[layer]?.subscribed = nil }
            return old.refusal == nil && state.fallbackReason == nil ? state.stream?.id : nil
        }
        if let streamID { subscribe(layer, on: streamID, context: descriptor.context) } else { streams.wakeUp() }
    }

    /// Forgets the subscription of run `generation` of `descriptor` (the server ended it, or
    /// the layer stopped listening for a reason the descriptor reports itself).
    func forget(_ descriptor: DocumentDescriptor, generation: Int) {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        state.withLock { state in
            guard let subscription = state.subscriptions[layer], subscription.descriptor === descriptor,
                  subscription.generation == generation else { return }
            state.subscriptions[layer] = nil
            if state.subscriptions.isEmpty { state.transfer?.cancel() }
        }
        streams.wakeUp()
    }

    /// `subscription` is out of `state.subscriptions`: the stream closes when it was the last
    /// layer (no connection held for nothing), else the subscription it holds there must be ended.
    /// - Returns: The unsubscribe request to send, if any.
    private static func leave(_ subscription: Subscription, in state: inout State) -> Unsubscribe? {
        guard !state.subscriptions.isEmpty else {
            state.transfer?.cancel()
            return nil
        }
        guard let subscribed = subscription.subscribed, let stream = state.stream, stream.id == subscribed.streamID,
              let path = state.path else { return nil }
        return (path, stream, subscribed.token)
    }

    /// `DELETE .../subscriptions` for `layer` on the control queue; then a layer the server
    /// refused gets the freed place. The token may have expired meanwhile: the server takes any
    /// JWT for the document there, the stream's key is the authority.
    private func unsubscribe(_ request: Unsubscribe, _ layer: StreamLayer, context: ClientContext) {
        controlQueue.async { [self] in
            // A failure leaves a subscription the server ends with the stream; its events are ignored.
            try? context.server.unsubscribe(path: request.path, streamID: request.stream.id, key: request.stream.key,
                                            documentID: layer.documentID, layer: layer.layer, jwt: request.token,
                                            session: controlSession, cancellation: context.lifetime)
            let refused = state.withLock { state in
                state.isCurrent(request.stream.id) ? state.subscriptions.first { $0.value.refusal != nil }?.key : nil
            }
            if let refused { retrySubscription(refused, context: context) }
        }
    }

    /// `POST .../subscriptions` for `layer` on the stream `streamID` on the control queue, with
    /// the layer's current token, epoch and committed cursor and the stream's key; retried with
    /// backoff while that stream stays the current one.
    private func subscribe(_ layer: StreamLayer, on streamID: String, context: ClientContext, attempt: Int = 0) {
        controlQueue.async { [self] in
            let found = state.withLock { state -> (Subscription, String, String?)? in
                guard !state.shutDown, let stream = state.stream, stream.id == streamID, let path = state.path,
                      let subscription = state.subscriptions[layer], subscription.refusal == nil else { return nil }
                state.unacknowledged[layer, default: 0] += 1
                return (subscription, path, stream.key)
            }
            guard let (subscription, path, key) = found else { return }
            let descriptor = subscription.descriptor
            let token = descriptor.jwt
            var acknowledging = false  // (the stream owes its `subscribed` event)
            defer { if !acknowledging { noteAcknowledged(layer, on: streamID) } }
            do throws(LayerSyncError) {
                let epoch = try descriptor.store.epoch()  // before `since`, as the long-poll reads them
                let since = try descriptor.store.since()
                let answer = try context.server.subscribe(path: path, streamID: streamID, key: key, documentID: layer.documentID,
                                                          layer: layer.layer, since: since, epoch: epoch, jwt: token,
                                                          session: controlSession, cancellation: context.lifetime)
                acknowledging = answer.acknowledged
                state.withLock { state in
                    guard state.subscriptions[layer]?.generation == subscription.generation else { return }
                    state.subscriptions[layer]?.subscribed = (streamID, token)
                    state.subscriptions[layer]?.refusals = 0
                    guard answer.acknowledged, state.isCurrent(streamID) else { return }
                    let owed = (state.acks[layer]?.owed ?? 0) + 1
                    state.acks[layer] = owed == 0 ? nil : (owed, state.acks[layer]?.due ?? .now())
                }
                // The cursor is ahead of the server's layer (restored from a backup): as for a
                // long-poll answer the checks refused (re-based, then subscribed again).
                if let ahead = answer.cursorAhead {
                    descriptor.workQueue.async { descriptor.streamAnswerRefused(ahead, generation: subscription.generation) }
                }
            } catch where error.code == .cancelled {
                return
            } catch where error.code == .accessDenied && error.httpStatus != nil {
                forget(descriptor, generation: subscription.generation)
                descriptor.streamFailedAuthentication(error, token: token, generation: subscription.generation)
            } catch where error.code == .invalidDocument && error.httpStatus == 404 {
                // A missing layer, or no open stream of this id and key where the request arrived:
                // the stream ended (``refuse(_:_:on:reason:context:)`` does nothing then and the
                // next stream's `hello` subscribes the layer), or it is open and the request
                // reached another server process than the one holding it, or lost its key on the way.
                if descriptor.isMissingOnServer(token: token, session: controlSession, cancellation: context.lifetime) {
                    forget(descriptor, generation: subscription.generation)
                    descriptor.streamLayerIsMissing(error, generation: subscription.generation)
                } else {
                    refuse(layer, subscription, on: streamID,
                           reason: "the server answers 404 to its subscription on the open change stream (\(error.message)): the request "
                               + "reached another server process than the one holding the stream, or lost its \(SyncServer.streamKeyHeader) "
                               + "header on the way", context: context)
                }
            } catch where error.httpStatus == 429 {
                refuse(layer, subscription, on: streamID, reason: "the server takes no more subscriptions on this stream (\(error.message))",
                       context: context)
            } catch {
                let delay = DocumentDescriptor.backoffSeconds(failures: attempt + 1)
                controlQueue.asyncAfter(deadline: .now() + delay) { [self] in
                    subscribe(layer, on: streamID, context: context, attempt: attempt + 1)
                }
            }
        }
    }

    /// A subscribe request of `layer` on `streamID` is settled: its `subscribed` event arrived,
    /// or its answer asks for none (a failure, a reset). See ``State/unacknowledged``.
    private func noteAcknowledged(_ layer: StreamLayer, on streamID: String) {
        state.withLock { state in
            if state.isCurrent(streamID) { state.settle(layer) }
        }
    }

    /// The stream `streamID` refused `layer`'s subscription (429: the server's limit per stream;
    /// 404 while that stream is open: the request did not reach the process holding it, or came
    /// without its key): the layer long-polls on its own (logged, ``transport(of:)``) until
    /// ``retrySubscription(_:context:)`` gets it onto the stream, after a backoff, when a place
    /// frees up or when a new stream opens (its `hello`). Nothing when `streamID` is not the
    /// current stream any more (the next one's `hello` subscribes the layer).
    private func refuse(_ layer: StreamLayer, _ subscription: Subscription, on streamID: String, reason: String, context: ClientContext) {
        let refusals = state.withLock { state -> Int? in
            guard state.isCurrent(streamID), state.subscriptions[layer]?.generation == subscription.generation else { return nil }
            state.subscriptions[layer]?.refusal = reason
            state.subscriptions[layer]?.subscribed = nil
            state.subscriptions[layer]?.refusals += 1
            return state.subscriptions[layer]?.refusals
        }
        guard let refusals else { return }
        if refusals == 1 { log("listening on \(layer.documentID)/\(layer.layer) uses its own long-poll: \(reason)", context: context) }
        subscription.descriptor.switchToLongPoll(from: subscription.generation)
        let (first, longest) = Self.subscriptionRetrySeconds
        controlQueue.asyncAfter(deadline: .now() + min(longest, first * Double(1 << min(refusals - 1, 16)))) { [self] in
            retrySubscription(layer, context: context)
        }
    }

    /// Moves a layer the server refused back to the stream and subscribes it (refused again: it
    /// goes on long-polling). Without a stream at the moment, the next `hello` does it.
    private func retrySubscription(_ layer: StreamLayer, context: ClientContext) {
        let found = state.withLock { state -> Subscription? in
            guard !state.shutDown, state.fallbackReason == nil, let subscription = state.subscriptions[layer],
                  subscription.refusal != nil else { return nil }
            return subscription
        }
        guard let found, let streamID = moveToStream(layer, found) else { return }
        subscribe(layer, on: streamID, context: context)
    }

    /// Moves a long-polling layer's listening back to the stream (the descriptor's new generation).
    /// - Returns: The current stream's id, `nil` when there is no stream now (or the layer
    ///   stopped listening).
    private func moveToStream(_ layer: StreamLayer, _ subscription: Subscription) -> String? {
        let generation = subscription.descriptor.switchToStream()
        return state.withLock { state in
            guard let current = state.subscriptions[layer], current.descriptor === subscription.descriptor else { return nil }
            guard let generation else {
                state.subscriptions[layer] = nil  // not listening any more
                return nil
            }
            state.subscriptions[layer]?.generation = generation
            state.subscriptions[layer]?.refusal = nil
            state.subscriptions[layer]?.subscribed = nil
            return state.stream?.id
        }
    }

    // MARK: The stream

    /// Ends the loop: aborts the stream, drops every subscription.
    func shutdown() {
        state.withLock { state in
            state.shutDown = true
            state.subscriptions = [:]
            state.transfer?.cancel()
        }
        streams.wakeUp()
    }

    /// The network is back: a stream waiting out its backoff or the network is opened now, and
    /// after a fallback the stream is tried again now rather than at its next retry (the path
    /// that came back may not be the one that buffered; a try that is buffered again falls
    /// back again, and its retry backoff goes on doubling).
    func wakeUp() {
        state.withLock { state in
            state.retryAt = .now()
            if state.fallbackReason != nil { state.nextTry = .now() }
        }
        streams.wakeUp()
    }

    /// Waits until the loop and the control queue have finished what they were running.
    func waitUntilIdle() {
        loopQueue.sync {}
        controlQueue.sync {}
    }

    /// The loop (on the stream's queue: the client's one listener thread): opens the stream with
    /// a listening layer's token, drives it (``HTTPTransferGroup/drive(upToSeconds:)``) and opens
    /// it again after a backoff when it ends, until no layer listens any more or the client
    /// shuts down. After a fallback no stream runs until the next try, ``streamRetrySeconds``
    /// (doubled per try) later.
    private func run(_ context: ClientContext) {
        while true {
            switch nextStep(context) {
            case .exit: return
            case .drive(let seconds): streams.drive(upToSeconds: seconds)
            case .open: open(context)
            }
        }
    }

    private func nextStep(_ context: ClientContext) -> Step {
        let now = DispatchTime.now()
        func seconds(until time: DispatchTime) -> Double {
            time > now ? Double(time.uptimeNanoseconds - now.uptimeNanoseconds) / 1e9 : 0
        }
        return state.withLock { state -> Step in
            if state.shutDown || context.isShutDown || state.subscriptions.isEmpty {
                guard state.transfer != nil else {  // (a cancelled stream ends in the next drive)
                    state.loopRunning = false
                    state.failures = 0  // (a new first layer starts afresh)
                    state.retryAt = now
                    state.lastStream = nil
                    return .exit
                }
                return .drive(seconds: 1)
            }
            guard state.transfer == nil else { return .drive(seconds: 1) }  // (about once a second: the watchdog)
            if state.fallbackReason != nil {
                guard now >= state.nextTry else { return .drive(seconds: min(60, seconds(until: state.nextTry))) }
                state.retries += 1
                let (first, longest) = Self.streamRetrySeconds
                state.nextTry = now + min(longest, first * Double(1 << min(state.retries, 16)))
                return .open
            }
            return state.retryAt <= now ? .open : .drive(seconds: min(1, seconds(until: state.retryAt)))
        }
    }

    /// Opens the stream with a listening layer's token (one the server did not refuse, if
    /// any), asking for the server info first when the stream's path is not known.
    private func open(_ context: ClientContext) {
        let transfer = TransferCancellation()
        let opener = state.withLock { state -> Subscription? in
            let all = state.subscriptions.values
            guard let opener = all.first(where: { !$0.descriptor.isTokenRejected }) ?? all.first else { return nil }
            state.transfer = transfer
            return opener
        }
        guard let opener else { return }
        let descriptor = opener.descriptor
        let token = descriptor.jwt
        func notNow(_ seconds: Double) {
            state.withLock { state in
                guard state.transfer === transfer else { return }
                state.transfer = nil
                state.retryAt = .now() + seconds
            }
        }
        guard context.server.isNetworkAvailable else { return notNow(DocumentDescriptor.maximumBackoffSeconds) }
        guard let (path, heartbeat) = streamEndpoint(context, cancellation: transfer) else {
            return notNow(backOffSeconds())
        }
        let (retrying, replaces) = state.withLock { state -> (Bool, StreamHandle?) in
            state.helloArmed = false
            state.bodyBytes = 0
            return (state.fallbackReason != nil, state.lastStream)
        }
        context.server.startStream(path: path, jwt: token, replaces: replaces, stallSeconds: max(1, Int((2 * heartbeat).rounded(.up))),
                                   group: streams, cancellation: transfer, watchdog: { [self] sent, bytes in
            watch(requestSent: sent, bodyBytes: bytes, context: context)
        }, onMessage: { [self] message in
            handle(message, transfer: transfer, context: context)
        }, completion: { [self] result in
            guard let verdict = streamEnded(transfer) else { return }
            switch result {
            case .success(let end):
                switch verdict {
                case .buffered(let reason)?: fallBack(reason, context: context)
                case .unreachable?:
                    streamDied()
                    backOff()
                case nil where end == .noHello:
                    fallBack("the change stream's answer ended before its hello (something between client and server buffers it)", context: context)
                case nil: backOff()
                }
            case .failure(let error) where error.code == .cancelled:
                break  // the last layer stopped listening, a fallback, or shutdown: the loop's check decides
            case .failure(let error) where error.code == .accessDenied && error.httpStatus != nil && !retrying:
                // The token is refused here as it would be for its layer: that layer stops, the
                // next one's token is tried. (While the layers long-poll, their loops tell it.)
                forget(descriptor, generation: opener.generation)
                descriptor.streamFailedAuthentication(error, token: token, generation: opener.generation)
            case .failure(let error) where error.httpStatus == 404 || error.httpStatus == 405:
                fallBack("the server answers \(error.httpStatus ?? 0) to POST \(path)", context: context)
            case .failure:
                streamDied()
                backOff()
            }
        })
    }

    /// The stream failed or went silent: the subscriptions' kept-alive connections may share
    /// its dead path, so the next ones connect anew (on the control queue, before them).
    private func streamDied() {
        controlQueue.async { [self] in controlSession.closeIdleConnections() }
    }

    /// The stream's path and heartbeat period from the server info (asked for when the
    /// connection sequence has not answered yet, or again when trying the stream after a
    /// fallback; no stream runs then); `nil` after a fallback or a failure.
    private func streamEndpoint(_ context: ClientContext, cancellation: TransferCancellation) -> (String, Double)? {
        if let known = state.withLock({ state in state.path.map { ($0, state.heartbeatSeconds) } }) { return known }
        let retrying = state.withLock { $0.fallbackReason != nil }
        var info = retrying ? nil : context.serverInfo.withLock { $0 }
        if info == nil {
            do throws(LayerSyncError) {
                info = try context.server.info(session: infoSession, cancellation: cancellation)
            } catch {
                return nil
            }
        }
        guard let info, let path = info.streamPath else {
            fallBack("the server (protocol \(info?.protocolMax ?? 1)) does not offer the change stream", context: context)
            return nil
        }
        state.withLock { state in
            state.path = path
            state.heartbeatSeconds = info.streamHeartbeatSeconds
        }
        return (path, info.streamHeartbeatSeconds)
    }

    /// The stream failed once more: the next one opens after a backoff.
    private func backOff() {
        let seconds = backOffSeconds()
        state.withLock { $0.retryAt = .now() + seconds }
    }

    /// Counts a failure of the stream. - Returns: The pause before the next one.
    private func backOffSeconds() -> Double {
        let failures = state.withLock { state in
            state.failures += 1
            return state.failures
        }
        return DocumentDescriptor.backoffSeconds(failures: failures)
    }

    /// The stream `transfer` ended: no subscription holds any more (each resubscribes on the
    /// next `hello`), nothing is awaited on it.
    /// - Returns: How the watchdog ended it, if it did (`.some(nil)`: it did not); `nil` when
    ///   `transfer` is not the current stream.
    private func streamEnded(_ transfer: TransferCancellation) -> Verdict?? {
        state.withLock { state -> Verdict?? in
            guard state.transfer === transfer else { return nil }
            state.transfer = nil
            state.stream = nil
            state.helloDue = nil
            state.acks = [:]
            state.unacknowledged = [:]
            state.probe?.cancellation.cancel()
            state.probe = nil
            defer { state.verdict = nil }
            for layer in state.subscriptions.keys { state.subscriptions[layer]?.subscribed = nil }
            return .some(state.verdict)
        }
    }

    /// Listening moves to long-polls: every layer on the stream starts its own loop (one the
    /// server refused has one already) and no stream is held; ``run(_:)`` tries the stream
    /// again later.
    private func fallBack(_ reason: String, context: ClientContext) {
        let moved = state.withLock { state -> [Subscription]? in
            state.path = nil  // asked for again when the stream is tried again
            state.transfer?.cancel()
            guard state.fallbackReason == nil else { return nil }  // a try after the fallback failed
            state.fallbackReason = reason
            state.retries = 0
            state.nextTry = .now() + Self.streamRetrySeconds.first
            return state.subscriptions.values.filter { $0.refusal == nil }
        }
        streams.wakeUp()
        guard let moved else { return }
        log("listening falls back to per-layer long-poll: \(reason); the change stream is tried again in "
            + "\(Int(Self.streamRetrySeconds.first)) s", context: context)
        for subscription in moved { subscription.descriptor.switchToLongPoll(from: subscription.generation) }
    }

    /// The stream works again after a fallback (its `hello` arrived): every layer moves back to it.
    /// - Returns: The layers to subscribe now on the stream `streamID`.
    private func comeBack(_ reason: String, context: ClientContext) -> [StreamLayer] {
        log("listening is back on the change stream (it had fallen back to long-poll: \(reason))", context: context)
        let moving = state.withLock { Array($0.subscriptions) }
        return moving.compactMap { layer, subscription in moveToStream(layer, subscription).map { _ in layer } }
    }

    /// One line on stderr about how listening works.
    private func log(_ message: String, context: ClientContext) {
        let line = "layersync: \(context.server.url.base): \(message)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
    }

    // MARK: Buffering

    /// The stream's watchdog, about once a second on the loop's thread (see the type's
    /// documentation).
    /// - Returns: Whether to end the stream (``State/verdict`` says why).
    private func watch(requestSent: Bool, bodyBytes: Int, context: ClientContext) -> Bool {
        let now = DispatchTime.now()
        let probe = state.withLock { state -> Probe? in
            if requestSent, !state.helloArmed {
                state.helloArmed = true
                if state.stream == nil { state.helloDue = now }
            }
            if bodyBytes != state.bodyBytes {
                // Bytes arrive: what is awaited may be behind them (a big page on a slow link).
                state.bodyBytes = bodyBytes
                if state.helloDue != nil { state.helloDue = now }
                state.acks = state.acks.mapValues { $0.owed > 0 ? ($0.owed, now) : $0 }
            }
            let owed = state.acks.values.filter { $0.owed > 0 }.map(\.due)
            guard let due = ([state.helloDue].compactMap { $0 } + owed).min(),
                  now >= due + Self.probeAfterSeconds else {
                state.probe?.cancellation.cancel()  // nothing overdue (any more)
                state.probe = nil
                return nil
            }
            guard let probe = state.probe else {
                state.probe = Probe(started: now)
                return state.probe
            }
            if let answered = probe.answered {
                if now >= due + Self.eventDeadlineSeconds, now >= answered + Self.probeGraceSeconds {
                    state.verdict = .buffered(state.helloDue != nil
                        ? "no hello within \(Int(Self.eventDeadlineSeconds)) s of opening the change stream while the server answers "
                          + "other requests (something between client and server buffers it)"
                        : "the change stream delivered its hello but no subscription's acknowledgement within "
                          + "\(Int(Self.eventDeadlineSeconds)) s while the server answers other requests (something between client and server buffers it)")
                }
            } else if probe.failed || now >= probe.started + Self.probeTimeoutSeconds {
                state.verdict = .unreachable
            }
            return nil
        }
        if let probe { DispatchQueue.global().async { [self] in run(probe, context: context) } }
        return state.withLock { $0.verdict != nil }
    }

    /// Sends the probe (`GET /sync/v1/info` on a connection of its own) and notes whether the
    /// server answered it (any HTTP answer) or not.
    private func run(_ probe: Probe, context: ClientContext) {
        let session = HTTPSession(connectTimeoutSeconds: connectTimeout)
        var answered = true
        do throws(LayerSyncError) {
            _ = try context.server.info(session: session, cancellation: probe.cancellation)
        } catch {
            if error.code == .cancelled { return }
            answered = !(error.code == .requestFailed && error.httpStatus == nil)
        }
        state.withLock { state in
            guard state.probe?.cancellation === probe.cancellation else { return }
            if answered { state.probe?.answered = .now() } else { state.probe?.failed = true }
        }
    }

    /// One event of the stream `transfer`, on the loop's thread; what it does to a layer goes
    /// to that layer's work queue. An event about a layer that does not listen is ignored.
    /// - Returns: Whether to go on reading.
    private func handle(_ message: StreamMessage, transfer: TransferCancellation, context: ClientContext) -> Bool {
        func subscription(_ layer: StreamLayer) -> Subscription? {
            state.withLock { $0.subscriptions[layer] }
        }
        switch message {
        case .hello(let streamID, let key):
            let hello = state.withLock { state -> (layers: [StreamLayer], refused: [StreamLayer], fellBack: String?)? in
                guard state.transfer === transfer else { return nil }
                state.stream = (streamID, key)
                state.lastStream = (streamID, key)
                state.failures = 0
                state.helloDue = nil
                defer { state.fallbackReason = nil }
                return (state.subscriptions.filter { $0.value.refusal == nil }.map(\.key),
                        state.subscriptions.filter { $0.value.refusal != nil }.map(\.key), state.fallbackReason)
            }
            guard let hello else { return false }
            if let fellBack = hello.fellBack {
                for layer in comeBack(fellBack, context: context) { subscribe(layer, on: streamID, context: context) }
            } else {
                for layer in hello.layers { subscribe(layer, on: streamID, context: context) }
                // A refusal was the previous stream's: the layers it refused try this one (after the others).
                for layer in hello.refused { retrySubscription(layer, context: context) }
            }
        case .subscribed(let layer):
            state.withLock { state in
                let owed = (state.acks[layer]?.owed ?? 0) - 1
                state.acks[layer] = owed == 0 ? nil : (owed, state.acks[layer]?.due ?? .now())
                state.settle(layer)
            }
        case .changes(let layer, let since, let page):
            guard let subscription = subscription(layer) else { break }
            let descriptor = subscription.descriptor
            descriptor.workQueue.async { descriptor.applyStreamedPage(page, since: since, generation: subscription.generation) }
        case .notice(let layer, _):
            guard let subscription = subscription(layer) else { break }
            let descriptor = subscription.descriptor
            descriptor.workQueue.async { descriptor.fetchStreamGap(generation: subscription.generation) }
        case .reset(let layer, _):
            guard let subscription = subscription(layer) else { break }
            let descriptor = subscription.descriptor
            descriptor.workQueue.async { descriptor.rebaseFromStream(generation: subscription.generation) }
        case .unsubscribed(let layer, let reason):
            // (about an earlier subscription while the newest one's `subscribed` is still due)
            guard state.withLock({ $0.unacknowledged[layer] == nil }), let subscription = subscription(layer) else { break }
            let descriptor = subscription.descriptor
            forget(descriptor, generation: subscription.generation)
            if reason == "not_found" {
                descriptor.streamLayerIsMissing(LayerSyncError(.invalidDocument, "not_found: the server ended the change stream's "
                                                               + "subscription (the document or layer was deleted)",
                                                               httpStatus: 404), generation: subscription.generation)
            } else {
                let token = subscription.subscribed?.token ?? descriptor.jwt
                descriptor.streamFailedAuthentication(LayerSyncError(.accessDenied, "the change stream ended the subscription: \(reason)",
                                                                     httpStatus: reason == "forbidden" ? 403 : 401),
                                                      token: token, generation: subscription.generation)
            }
        case .bye, .other:
            break  // bye: the answer ends next, and the loop reconnects
        }
        return !context.isShutDown
    }
}
