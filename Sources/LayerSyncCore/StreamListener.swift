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

/// Whose change stream carries a layer: the server gives a stream to the `user_id` of the JWT
/// that opened it and takes subscriptions on it only with JWTs of that user (protocol.md
/// "Protocol version 2"), so a client listening with the JWTs of several users holds one
/// stream per user. JWTs without `user_id` are one owner of their own.
struct StreamOwner: Hashable, Sendable, CustomStringConvertible {
    /// The JWT's `user_id`, `nil` when it has none.
    let userID: String?

    /// The owner of the stream `jwt` opens or subscribes on (a JWT that does not parse counts
    /// as one without `user_id`: the server refuses it anyway).
    init(jwt: String) { userID = (try? JWTClaims(token: jwt))?.userID }

    var description: String { userID.map { "user '\($0)'" } ?? "JWTs without user_id" }
}

/// The one listener of a client (ARCHITECTURE.md §4): one thread that holds the change streams
/// (``SyncServer/startStream(path:jwt:replaces:stallSeconds:group:cancellation:watchdog:onMessage:completion:)``)
/// of every descriptor whose ``DocumentDescriptor/startListening()`` was called, all driven by
/// one ``HTTPTransferGroup``, and one serial queue for the short requests that add and remove
/// their subscriptions.
///
/// One stream per ``StreamOwner``: the server lets only the JWTs of the user who opened a stream
/// subscribe on it, so each layer is subscribed on the stream of its own JWT's user, opened with
/// one of that user's JWTs (one stream in all for a client of one user). A user's stream closes
/// when that user's last layer stops listening; a reauthentication with a JWT of another user
/// moves the layer to that user's stream (its subscription on the old one is ended, and whatever
/// the old one still carries for it is ignored).
///
/// What an event does to a layer runs on that layer's work queue, by the code the long-poll
/// uses (``DocumentDescriptor/applyStreamedPage(_:since:generation:)``). Each stream reconnects
/// with capped exponential backoff and full jitter, and every subscription resumes from its
/// layer's committed cursor. Each new stream names its user's one before it (`replaces`): the
/// server closes that one if it still holds it (a path that takes bytes and delivers none).
///
/// Buffering (protocol.md "What the client does"), watched on each stream: the `hello` is due
/// when the request is sent, a `subscribed` event when its subscription is answered. An event
/// overdue for ``probeAfterSeconds`` with nothing arriving on that stream starts a probe
/// (`GET /sync/v1/info` on its own connection). The stream is buffered when the event is still
/// missing ``eventDeadlineSeconds`` after it was due and ``probeGraceSeconds`` after the probe
/// was answered: the server answers, its stream does not arrive. A probe that gets no answer
/// means the network is out (a stall, not buffering): the stream is opened again after a
/// backoff. Buffering, a server that does not advertise the stream, or a 404 to it move all
/// listening to per-layer long-polls (logged on stderr, ``SyncClient/listeningTransport``; no
/// stream is held then); the streams are tried again after ``streamRetrySeconds`` (doubled per
/// failed try) and take the layers back when one works. A layer whose subscription the server
/// refuses with 429 (its `max_subscriptions` per stream) long-polls on its own (logged,
/// ``DocumentDescriptor/listeningTransport``) and is subscribed again after
/// ``subscriptionRetrySeconds`` (doubled), or at once when another layer's subscription on the
/// same stream ends.
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
    /// First pause before subscribing again a layer the server refused (429), and the longest.
    static let subscriptionRetrySeconds = (first: 60.0, longest: 900.0)

    private struct Subscription {
        let descriptor: DocumentDescriptor
        /// The descriptor's listening generation this subscription serves (stale while the
        /// layer long-polls: moving back asks the descriptor for a new one).
        var generation: Int
        /// Whose stream carries it: the owner of the descriptor's token when it was added or
        /// last subscribed again (``resubscribe(_:)``).
        var owner: StreamOwner
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

    /// How a stream's watchdog ended it.
    private enum Verdict {
        /// Events do not arrive while the server answers: fall back to long-polls.
        case buffered(String)
        /// The server does not answer at all: reopen after a backoff.
        case unreachable
    }

    /// One owner's stream: the current one (if any), its reconnect backoff and what its
    /// watchdog awaits on it.
    private struct Channel {
        /// Aborts the running stream transfer (or the server info asked for before it); `nil`
        /// while none runs.
        var transfer: TransferCancellation?
        /// The current stream's id, from its `hello`.
        var streamID: String?
        /// The id of the last `hello`, kept after its stream ended: the next stream names it
        /// (`replaces`) so the server closes it if it still holds it (a path that went silent).
        var lastStreamID: String?
        /// Failures in a row (the backoff), and when the next stream may be opened.
        var failures = 0
        var retryAt = DispatchTime.now()
        /// Since when the current stream's `hello` is due (the request was sent), until it arrives.
        var helloDue: DispatchTime?
        var helloArmed = false
        /// Per layer: `subscribed` events the current stream owes (answers minus events;
        /// below zero when an event beat its answer) and since when.
        var acks: [StreamLayer: (owed: Int, due: DispatchTime)] = [:]
        /// Body bytes of the current stream at the last watchdog call.
        var bodyBytes = 0
        var probe: Probe?
        var verdict: Verdict?
    }

    private struct State {
        var subscriptions: [StreamLayer: Subscription] = [:]
        var channels: [StreamOwner: Channel] = [:]
        /// Why listening uses long-polls, while it does.
        var fallbackReason: String?
        /// Tries of the stream since the fallback (the retry's backoff), and when the next is due.
        var retries = 0
        var nextTry = DispatchTime.now()
        var loopRunning = false
        /// The streams' path and heartbeat period, once the server info said them (`nil`
        /// only while no stream runs).
        var path: String?
        var heartbeatSeconds = 15.0
        var shutDown = false

        /// Whether `streamID` is the current stream of `owner`.
        func isCurrent(_ streamID: String, of owner: StreamOwner) -> Bool { channels[owner]?.streamID == streamID }

        /// Whether a layer of `owner` listens.
        func hasSubscriptions(of owner: StreamOwner) -> Bool { subscriptions.values.contains { $0.owner == owner } }

        /// Whether any stream (or the server info before one) is in flight.
        var isStreaming: Bool { channels.values.contains { $0.transfer != nil } }
    }

    /// An unsubscribe request to send: the stream's path and id, the token subscribed with.
    private typealias Unsubscribe = (path: String, streamID: String, token: String)

    /// What the loop does next.
    private enum Step {
        case exit
        case open([StreamOwner])
        case drive(seconds: Double)
    }

    private let state = Mutex(State())
    private let loopQueue = DispatchQueue(label: "layersync.client.stream")
    private let controlQueue = DispatchQueue(label: "layersync.client.stream.control")
    private let connectTimeout: Double
    /// The running streams, driven by the loop's thread.
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
    /// layer) on the stream of its token's user (opened when it is that user's first layer).
    /// - Returns: `false` when listening uses long-polls (the caller starts the descriptor's
    ///   loop; the stream takes it back when it works again).
    func add(_ descriptor: DocumentDescriptor, generation: Int) -> Bool {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        let owner = StreamOwner(jwt: descriptor.jwt)
        let (onStream, startLoop, streamID, left) = state.withLock { state -> (Bool, Bool, String?, Unsubscribe?) in
            guard !state.shutDown else { return (false, false, nil, nil) }
            let old = state.subscriptions[layer]
            state.subscriptions[layer] = Subscription(descriptor: descriptor, generation: generation, owner: owner)
            let left = old.flatMap { $0.owner == owner ? nil : Self.leave($0, in: &state) }
            defer { state.loopRunning = true }
            return (state.fallbackReason == nil, !state.loopRunning, state.fallbackReason == nil ? state.channels[owner]?.streamID : nil, left)
        }
        let context = descriptor.context
        if let left { unsubscribe(left, layer, context: context) }
        if startLoop {
            loopQueue.async { [self] in run(context) }
        } else if let streamID {
            subscribe(layer, on: streamID, of: owner, context: context)
        } else {
            streams.wakeUp()  // the loop opens this user's stream
        }
        return onStream
    }

    /// Removes `descriptor`'s subscription (stop listening): an unsubscribe request when it is
    /// subscribed (its place goes to a layer the server refused), or its user's stream closes
    /// when it was that user's last layer.
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
    /// token). A new token of another user moves it to that user's stream.
    func resubscribe(_ descriptor: DocumentDescriptor) {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        let owner = StreamOwner(jwt: descriptor.jwt)
        let (streamID, left) = state.withLock { state -> (String?, Unsubscribe?) in
            guard let old = state.subscriptions[layer], old.descriptor === descriptor else { return (nil, nil) }
            state.subscriptions[layer]?.owner = owner
            if old.refusal == nil { state.subscriptions[layer]?.subscribed = nil }
            let left = old.owner == owner ? nil : Self.leave(old, in: &state)
            return (old.refusal == nil && state.fallbackReason == nil ? state.channels[owner]?.streamID : nil, left)
        }
        let context = descriptor.context
        if let left { unsubscribe(left, layer, context: context) }
        if let streamID { subscribe(layer, on: streamID, of: owner, context: context) } else { streams.wakeUp() }
    }

    /// Forgets the subscription of run `generation` of `descriptor` (the server ended it, or
    /// the layer stopped listening for a reason the descriptor reports itself).
    func forget(_ descriptor: DocumentDescriptor, generation: Int) {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        state.withLock { state in
            guard let subscription = state.subscriptions[layer], subscription.descriptor === descriptor,
                  subscription.generation == generation else { return }
            state.subscriptions[layer] = nil
            if !state.hasSubscriptions(of: subscription.owner) { state.channels[subscription.owner]?.transfer?.cancel() }
        }
        streams.wakeUp()
    }

    /// `subscription` left its owner's stream (it is out of `state.subscriptions`, or belongs to
    /// another owner there now): that stream closes when it was the owner's last layer (no
    /// connection held for nothing), else the subscription it holds there must be ended.
    /// - Returns: The unsubscribe request to send, if any.
    private static func leave(_ subscription: Subscription, in state: inout State) -> Unsubscribe? {
        let owner = subscription.owner
        guard state.hasSubscriptions(of: owner) else {
            state.channels[owner]?.transfer?.cancel()
            return nil
        }
        guard let subscribed = subscription.subscribed, state.isCurrent(subscribed.streamID, of: owner), let path = state.path else { return nil }
        return (path, subscribed.streamID, subscribed.token)
    }

    /// `DELETE .../subscriptions` for `layer` on the control queue; then a layer of the same
    /// stream the server refused gets the freed place.
    private func unsubscribe(_ request: Unsubscribe, _ layer: StreamLayer, context: ClientContext) {
        controlQueue.async { [self] in
            // A failure leaves a subscription the server ends with the stream; its events are ignored.
            try? context.server.unsubscribe(path: request.path, streamID: request.streamID, documentID: layer.documentID,
                                            layer: layer.layer, jwt: request.token, session: controlSession,
                                            cancellation: context.lifetime)
            let refused = state.withLock { state in
                state.subscriptions.first { $0.value.refusal != nil && state.isCurrent(request.streamID, of: $0.value.owner) }?.key
            }
            if let refused { retrySubscription(refused, context: context) }
        }
    }

    /// `POST .../subscriptions` for `layer` on `owner`'s stream `streamID` on the control queue,
    /// with the layer's current token, epoch and committed cursor; retried with backoff while
    /// that stream stays the owner's current one.
    private func subscribe(_ layer: StreamLayer, on streamID: String, of owner: StreamOwner, context: ClientContext, attempt: Int = 0) {
        controlQueue.async { [self] in
            let found = state.withLock { state -> (Subscription, String)? in
                guard !state.shutDown, state.isCurrent(streamID, of: owner), let path = state.path,
                      let subscription = state.subscriptions[layer], subscription.owner == owner, subscription.refusal == nil else { return nil }
                return (subscription, path)
            }
            guard let (subscription, path) = found else { return }
            let descriptor = subscription.descriptor
            let token = descriptor.jwt
            // A new token of another user (its reauthentication is finishing): its resubscribe moves the layer.
            guard StreamOwner(jwt: token) == owner else { return }
            do throws(LayerSyncError) {
                let epoch = try descriptor.store.epoch()  // before `since`, as the long-poll reads them
                let since = try descriptor.store.since()
                let answer = try context.server.subscribe(path: path, streamID: streamID, documentID: layer.documentID, layer: layer.layer,
                                                          since: since, epoch: epoch, jwt: token, session: controlSession,
                                                          cancellation: context.lifetime)
                state.withLock { state in
                    guard state.subscriptions[layer]?.generation == subscription.generation, state.subscriptions[layer]?.owner == owner else { return }
                    state.subscriptions[layer]?.subscribed = (streamID, token)
                    state.subscriptions[layer]?.refusals = 0
                    guard answer.acknowledged, state.isCurrent(streamID, of: owner), var channel = state.channels[owner] else { return }
                    let owed = (channel.acks[layer]?.owed ?? 0) + 1
                    channel.acks[layer] = owed == 0 ? nil : (owed, channel.acks[layer]?.due ?? .now())
                    state.channels[owner] = channel
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
                // An unknown stream (it ended: the loop resubscribes on the next one) or a missing layer.
                if descriptor.isMissingOnServer(token: token, session: controlSession, cancellation: context.lifetime) {
                    forget(descriptor, generation: subscription.generation)
                    descriptor.streamLayerIsMissing(error, generation: subscription.generation)
                }
            } catch where error.httpStatus == 429 {
                refuse(layer, subscription, reason: "the server takes no more subscriptions on this stream (\(error.message))", context: context)
            } catch {
                let delay = DocumentDescriptor.backoffSeconds(failures: attempt + 1)
                controlQueue.asyncAfter(deadline: .now() + delay) { [self] in
                    subscribe(layer, on: streamID, of: owner, context: context, attempt: attempt + 1)
                }
            }
        }
    }

    /// The server refused `layer`'s subscription (429: its limit per stream): the layer
    /// long-polls on its own (logged, ``transport(of:)``) until ``retrySubscription(_:context:)``
    /// gets it onto the stream.
    private func refuse(_ layer: StreamLayer, _ subscription: Subscription, reason: String, context: ClientContext) {
        let refusals = state.withLock { state -> Int? in
            guard state.subscriptions[layer]?.generation == subscription.generation else { return nil }
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
    /// goes on long-polling). Without a stream of its user at the moment, that stream's next
    /// `hello` does it.
    private func retrySubscription(_ layer: StreamLayer, context: ClientContext) {
        let found = state.withLock { state -> Subscription? in
            guard !state.shutDown, state.fallbackReason == nil, let subscription = state.subscriptions[layer],
                  subscription.refusal != nil else { return nil }
            return subscription
        }
        guard let found, let (streamID, owner) = moveToStream(layer, found) else { return }
        subscribe(layer, on: streamID, of: owner, context: context)
    }

    /// Moves a long-polling layer's listening back to the stream (the descriptor's new generation).
    /// - Returns: Its user's current stream id and that user, `nil` when that user has no
    ///   stream now (or the layer stopped listening).
    private func moveToStream(_ layer: StreamLayer, _ subscription: Subscription) -> (String, StreamOwner)? {
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
            return state.channels[current.owner]?.streamID.map { ($0, current.owner) }
        }
    }

    // MARK: The streams

    /// Ends the loop: aborts the streams, drops every subscription.
    func shutdown() {
        state.withLock { state in
            state.shutDown = true
            state.subscriptions = [:]
            for owner in state.channels.keys { state.channels[owner]?.transfer?.cancel() }
        }
        streams.wakeUp()
    }

    /// The network is back: a stream waiting out its backoff or the network is opened now.
    func wakeUp() {
        state.withLock { state in
            let now = DispatchTime.now()
            for owner in state.channels.keys { state.channels[owner]?.retryAt = now }
        }
        streams.wakeUp()
    }

    /// Waits until the loop and the control queue have finished what they were running.
    func waitUntilIdle() {
        loopQueue.sync {}
        controlQueue.sync {}
    }

    /// The loop (on the stream's queue: the client's one listener thread): opens a stream for
    /// each user with a listening layer, with one of that user's tokens, drives them all
    /// (``HTTPTransferGroup/drive(upToSeconds:)``) and opens each again after a backoff when it
    /// ends, until no layer listens any more or the client shuts down. After a fallback no
    /// stream runs until the next try, ``streamRetrySeconds`` (doubled per try) later.
    private func run(_ context: ClientContext) {
        while true {
            switch nextStep(context) {
            case .exit: return
            case .drive(let seconds): streams.drive(upToSeconds: seconds)
            case .open(let owners): for owner in owners { open(owner, context: context) }
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
                guard state.isStreaming else {  // (cancelled streams end in the next drive)
                    state.loopRunning = false
                    state.channels = [:]
                    return .exit
                }
                return .drive(seconds: 1)
            }
            // A user whose last layer stopped listening has no stream (it was cancelled then).
            state.channels = state.channels.filter { $0.value.transfer != nil || state.hasSubscriptions(of: $0.key) }
            let owners = Set(state.subscriptions.values.map(\.owner))
            if state.fallbackReason != nil {
                guard !state.isStreaming else { return .drive(seconds: 1) }  // a try runs
                guard now >= state.nextTry else { return .drive(seconds: min(60, seconds(until: state.nextTry))) }
                state.retries += 1
                let (first, longest) = Self.streamRetrySeconds
                state.nextTry = now + min(longest, first * Double(1 << min(state.retries, 16)))
                return .open(Array(owners))
            }
            let idle = owners.filter { state.channels[$0]?.transfer == nil }
            let due = idle.filter { (state.channels[$0]?.retryAt ?? now) <= now }
            if !due.isEmpty { return .open(Array(due)) }
            let next = idle.compactMap { state.channels[$0]?.retryAt }.min().map(seconds(until:)) ?? 1
            return .drive(seconds: min(1, next))  // (about once a second: the streams' watchdogs)
        }
    }

    /// Opens `owner`'s stream with a token of that user (one the server did not refuse, if
    /// any), asking for the server info first when the streams' path is not known.
    private func open(_ owner: StreamOwner, context: ClientContext) {
        let transfer = TransferCancellation()
        let opener = state.withLock { state -> Subscription? in
            let mine = state.subscriptions.values.filter { $0.owner == owner }
            guard let opener = mine.first(where: { !$0.descriptor.isTokenRejected }) ?? mine.first else { return nil }
            if state.channels[owner] == nil { state.channels[owner] = Channel() }
            state.channels[owner]?.transfer = transfer
            return opener
        }
        guard let opener else { return }
        let descriptor = opener.descriptor
        let token = descriptor.jwt
        func notNow(_ seconds: Double) {
            state.withLock { state in
                guard state.channels[owner]?.transfer === transfer else { return }
                state.channels[owner]?.transfer = nil
                state.channels[owner]?.retryAt = .now() + seconds
            }
        }
        // A token of another user now (its reauthentication is finishing): its resubscribe moves the layer.
        guard StreamOwner(jwt: token) == owner else { return notNow(0.5) }
        guard context.server.isNetworkAvailable else { return notNow(DocumentDescriptor.maximumBackoffSeconds) }
        guard let (path, heartbeat) = streamEndpoint(context, cancellation: transfer) else {
            return notNow(backOffSeconds(owner))
        }
        let (retrying, replaces) = state.withLock { state -> (Bool, String?) in
            state.channels[owner]?.helloArmed = false
            state.channels[owner]?.bodyBytes = 0
            return (state.fallbackReason != nil, state.channels[owner]?.lastStreamID)
        }
        context.server.startStream(path: path, jwt: token, replaces: replaces, stallSeconds: max(1, Int((2 * heartbeat).rounded(.up))),
                                   group: streams, cancellation: transfer, watchdog: { [self] sent, bytes in
            watch(owner, requestSent: sent, bodyBytes: bytes, context: context)
        }, onMessage: { [self] message in
            handle(message, on: owner, transfer: transfer, context: context)
        }, completion: { [self] result in
            guard let verdict = streamEnded(owner, transfer) else { return }
            switch result {
            case .success(let end):
                switch verdict {
                case .buffered(let reason)?: fallBack(reason, context: context)
                case .unreachable?:
                    streamDied()
                    backOff(owner)
                case nil where end == .noHello:
                    fallBack("the change stream's answer ended before its hello (something between client and server buffers it)", context: context)
                case nil: backOff(owner)
                }
            case .failure(let error) where error.code == .cancelled:
                break  // the user's last layer stopped listening, a fallback, or shutdown: the loop's check decides
            case .failure(let error) where error.code == .accessDenied && error.httpStatus != nil && !retrying:
                // The token is refused here as it would be for its layer: that layer stops, the
                // user's next one's token is tried. (While the layers long-poll, their loops tell it.)
                forget(descriptor, generation: opener.generation)
                descriptor.streamFailedAuthentication(error, token: token, generation: opener.generation)
            case .failure(let error) where error.httpStatus == 404 || error.httpStatus == 405:
                fallBack("the server answers \(error.httpStatus ?? 0) to POST \(path)", context: context)
            case .failure:
                streamDied()
                backOff(owner)
            }
        })
    }

    /// The stream failed or went silent: the subscriptions' kept-alive connections may share
    /// its dead path, so the next ones connect anew (on the control queue, before them).
    private func streamDied() {
        controlQueue.async { [self] in controlSession.closeIdleConnections() }
    }

    /// The streams' path and heartbeat period from the server info (asked for when the
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

    /// `owner`'s stream failed once more: the next one opens after a backoff.
    private func backOff(_ owner: StreamOwner) {
        let seconds = backOffSeconds(owner)
        state.withLock { $0.channels[owner]?.retryAt = .now() + seconds }
    }

    /// Counts a failure of `owner`'s stream. - Returns: The pause before its next one.
    private func backOffSeconds(_ owner: StreamOwner) -> Double {
        let failures = state.withLock { state in
            state.channels[owner]?.failures += 1
            return state.channels[owner]?.failures ?? 1
        }
        return DocumentDescriptor.backoffSeconds(failures: failures)
    }

    /// `owner`'s stream `transfer` ended: none of that user's subscriptions holds any more
    /// (each resubscribes on the next `hello`), nothing is awaited on it.
    /// - Returns: How the watchdog ended it, if it did (`.some(nil)`: it did not); `nil` when
    ///   `transfer` is not that user's stream.
    private func streamEnded(_ owner: StreamOwner, _ transfer: TransferCancellation) -> Verdict?? {
        state.withLock { state -> Verdict?? in
            guard var channel = state.channels[owner], channel.transfer === transfer else { return nil }
            channel.transfer = nil
            channel.streamID = nil
            channel.helloDue = nil
            channel.acks = [:]
            channel.probe?.cancellation.cancel()
            channel.probe = nil
            defer { channel.verdict = nil; state.channels[owner] = channel }
            for (layer, subscription) in state.subscriptions where subscription.owner == owner {
                state.subscriptions[layer]?.subscribed = nil
            }
            return .some(channel.verdict)
        }
    }

    /// Listening moves to long-polls: every layer on a stream starts its own loop (one the
    /// server refused has one already) and no stream is held; ``run(_:)`` tries the streams
    /// again later.
    private func fallBack(_ reason: String, context: ClientContext) {
        let moved = state.withLock { state -> [Subscription]? in
            state.path = nil  // asked for again when the stream is tried again
            for owner in state.channels.keys { state.channels[owner]?.transfer?.cancel() }
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

    /// A stream works again after a fallback (its `hello` arrived): every layer moves back to
    /// the streams.
    /// - Returns: The layers to subscribe now (those whose user's stream has said hello), with
    ///   that stream and user.
    private func comeBack(_ reason: String, context: ClientContext) -> [(StreamLayer, String, StreamOwner)] {
        log("listening is back on the change stream (it had fallen back to long-poll: \(reason))", context: context)
        let moving = state.withLock { Array($0.subscriptions) }
        return moving.compactMap { layer, subscription in moveToStream(layer, subscription).map { (layer, $0.0, $0.1) } }
    }

    /// One line on stderr about how listening works.
    private func log(_ message: String, context: ClientContext) {
        let line = "layersync: \(context.server.url.base): \(message)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
    }

    // MARK: Buffering

    /// `owner`'s stream's watchdog, about once a second on the loop's thread (see the type's
    /// documentation).
    /// - Returns: Whether to end the stream (``Channel/verdict`` says why).
    private func watch(_ owner: StreamOwner, requestSent: Bool, bodyBytes: Int, context: ClientContext) -> Bool {
        let now = DispatchTime.now()
        let probe = state.withLock { state -> Probe? in
            guard var channel = state.channels[owner] else { return nil }
            defer { state.channels[owner] = channel }
            if requestSent, !channel.helloArmed {
                channel.helloArmed = true
                if channel.streamID == nil { channel.helloDue = now }
            }
            if bodyBytes != channel.bodyBytes {
                // Bytes arrive: what is awaited may be behind them (a big page on a slow link).
                channel.bodyBytes = bodyBytes
                if channel.helloDue != nil { channel.helloDue = now }
                channel.acks = channel.acks.mapValues { $0.owed > 0 ? ($0.owed, now) : $0 }
            }
            let owed = channel.acks.values.filter { $0.owed > 0 }.map(\.due)
            guard let due = ([channel.helloDue].compactMap { $0 } + owed).min(),
                  now >= due + Self.probeAfterSeconds else {
                channel.probe?.cancellation.cancel()  // nothing overdue (any more)
                channel.probe = nil
                return nil
            }
            guard let probe = channel.probe else {
                channel.probe = Probe(started: now)
                return channel.probe
            }
            if let answered = probe.answered {
                if now >= due + Self.eventDeadlineSeconds, now >= answered + Self.probeGraceSeconds {
                    channel.verdict = .buffered(channel.helloDue != nil
                        ? "no hello within \(Int(Self.eventDeadlineSeconds)) s of opening the change stream while the server answers "
                          + "other requests (something between client and server buffers it)"
                        : "the change stream delivered its hello but no subscription's acknowledgement within "
                          + "\(Int(Self.eventDeadlineSeconds)) s while the server answers other requests (something between client and server buffers it)")
                }
            } else if probe.failed || now >= probe.started + Self.probeTimeoutSeconds {
                channel.verdict = .unreachable
            }
            return nil
        }
        if let probe { DispatchQueue.global().async { [self] in run(probe, of: owner, context: context) } }
        return state.withLock { $0.channels[owner]?.verdict != nil }
    }

    /// Sends the probe (`GET /sync/v1/info` on a connection of its own) and notes whether the
    /// server answered it (any HTTP answer) or not.
    private func run(_ probe: Probe, of owner: StreamOwner, context: ClientContext) {
        let session = HTTPSession(connectTimeoutSeconds: connectTimeout)
        var answered = true
        do throws(LayerSyncError) {
            _ = try context.server.info(session: session, cancellation: probe.cancellation)
        } catch {
            if error.code == .cancelled { return }
            answered = !(error.code == .requestFailed && error.httpStatus == nil)
        }
        state.withLock { state in
            guard state.channels[owner]?.probe?.cancellation === probe.cancellation else { return }
            if answered { state.channels[owner]?.probe?.answered = .now() } else { state.channels[owner]?.probe?.failed = true }
        }
    }

    /// One event of `owner`'s stream `transfer`, on the loop's thread; what it does to a layer
    /// goes to that layer's work queue. An event about a layer that is not on this user's
    /// stream (it moved to another user's) is ignored.
    /// - Returns: Whether to go on reading.
    private func handle(_ message: StreamMessage, on owner: StreamOwner, transfer: TransferCancellation, context: ClientContext) -> Bool {
        func subscription(_ layer: StreamLayer) -> Subscription? {
            state.withLock { state in state.subscriptions[layer].flatMap { $0.owner == owner ? $0 : nil } }
        }
        switch message {
        case .hello(let streamID):
            let hello = state.withLock { state -> (layers: [StreamLayer], fellBack: String?)? in
                guard var channel = state.channels[owner], channel.transfer === transfer else { return nil }
                channel.streamID = streamID
                channel.lastStreamID = streamID
                channel.failures = 0
                channel.helloDue = nil
                state.channels[owner] = channel
                defer { state.fallbackReason = nil }
                return (state.subscriptions.filter { $0.value.refusal == nil && $0.value.owner == owner }.map(\.key), state.fallbackReason)
            }
            guard let hello else { return false }
            let subscribing = hello.fellBack.map { comeBack($0, context: context) } ?? hello.layers.map { ($0, streamID, owner) }
            for (layer, streamID, owner) in subscribing { subscribe(layer, on: streamID, of: owner, context: context) }
        case .subscribed(let layer):
            state.withLock { state in
                guard var channel = state.channels[owner] else { return }
                let owed = (channel.acks[layer]?.owed ?? 0) - 1
                channel.acks[layer] = owed == 0 ? nil : (owed, channel.acks[layer]?.due ?? .now())
                state.channels[owner] = channel
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
            guard let subscription = subscription(layer) else { break }
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
