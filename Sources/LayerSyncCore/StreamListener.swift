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

/// The one listener of a client (ARCHITECTURE.md §4): one thread that holds one change stream
/// (``SyncServer/openStream(path:jwt:stallSeconds:session:cancellation:onMessage:)``) for every
/// descriptor whose ``DocumentDescriptor/startListening()`` was called, and one serial queue for
/// the short requests that add and remove their subscriptions.
///
/// What an event does to a layer runs on that layer's work queue, by the code the long-poll
/// uses (``DocumentDescriptor/applyStreamedPage(_:since:generation:)``). The stream reconnects
/// with capped exponential backoff and full jitter, and every subscription resumes from its
/// layer's committed cursor. When the server does not advertise the stream, answers 404 to it,
/// or its `hello` does not arrive within 5 s of the request (something in between buffers
/// it), the client falls back to per-layer long-polls for the rest of its life, logs it once on
/// stderr and reports it in ``SyncClient/listeningTransport``.
final class StreamListener: Sendable {
    private struct Subscription {
        let descriptor: DocumentDescriptor
        /// The descriptor's listening generation this subscription serves.
        let generation: Int
        /// The stream it is subscribed on, with the token it was subscribed with.
        var subscribed: (streamID: String, token: String)?
    }

    private struct State {
        var subscriptions: [StreamLayer: Subscription] = [:]
        /// Why listening uses long-polls, once decided.
        var fallbackReason: String?
        var loopRunning = false
        /// The current stream's id, from its `hello`.
        var streamID: String?
        /// Aborts the current stream transfer.
        var transfer: TransferCancellation?
        /// The stream's path and heartbeat period, once the server info said them.
        var path: String?
        var heartbeatSeconds = 15.0
        var failures = 0
        var shutDown = false
    }

    private let state = Mutex(State())
    private let loopQueue = DispatchQueue(label: "layersync.client.stream")
    private let controlQueue = DispatchQueue(label: "layersync.client.stream.control")
    private let wake = UncheckedSendable(DispatchSemaphore(value: 0))
    private let streamSession: HTTPSession
    private let controlSession: HTTPSession

    init(connectTimeout: Double) {
        streamSession = HTTPSession(connectTimeoutSeconds: connectTimeout)
        controlSession = HTTPSession(connectTimeoutSeconds: connectTimeout)
    }

    /// How listening works now: the stream, or long-polls after a fallback.
    var transport: ListeningTransport {
        state.withLock { $0.fallbackReason.map { .longPoll(reason: $0) } ?? .stream }
    }

    // MARK: Subscriptions

    /// Adds the listening run `generation` of `descriptor` (replacing an earlier one of its layer).
    /// - Returns: `false` when listening uses long-polls (the caller starts the descriptor's loop).
    func add(_ descriptor: DocumentDescriptor, generation: Int) -> Bool {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        let (added, startLoop, streamID) = state.withLock { state -> (Bool, Bool, String?) in
            guard state.fallbackReason == nil, !state.shutDown else { return (false, false, nil) }
            state.subscriptions[layer] = Subscription(descriptor: descriptor, generation: generation)
            defer { state.loopRunning = true }
            return (true, !state.loopRunning, state.streamID)
        }
        guard added else { return false }
        if startLoop {
            let context = descriptor.context
            loopQueue.async { [self] in run(context) }
        } else if let streamID {
            subscribe(layer, on: streamID, context: descriptor.context)
        }
        return true
    }

    /// Removes `descriptor`'s subscription (stop listening): an unsubscribe request when it is
    /// subscribed, or the stream closes when it was the last one.
    func remove(_ descriptor: DocumentDescriptor) {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        let unsubscribe = state.withLock { state -> (path: String, streamID: String, token: String)? in
            guard let subscription = state.subscriptions[layer], subscription.descriptor === descriptor else { return nil }
            state.subscriptions[layer] = nil
            if state.subscriptions.isEmpty {
                state.transfer?.cancel()  // nothing left to listen to: no connection held
                return nil
            }
            guard let subscribed = subscription.subscribed, subscribed.streamID == state.streamID, let path = state.path else { return nil }
            return (path, subscribed.streamID, subscribed.token)
        }
        guard let unsubscribe else { return }
        let context = descriptor.context
        controlQueue.async { [self] in
            // A failure leaves a subscription the server ends with the stream; its events are ignored.
            try? context.server.unsubscribe(path: unsubscribe.path, streamID: unsubscribe.streamID, documentID: layer.documentID,
                                            layer: layer.layer, jwt: unsubscribe.token, session: controlSession,
                                            cancellation: context.lifetime)
        }
    }

    /// Subscribes `descriptor`'s layer again from its cursor (after a reset or a new token).
    func resubscribe(_ descriptor: DocumentDescriptor) {
        let layer = StreamLayer(documentID: descriptor.documentID, layer: descriptor.layerName)
        let streamID = state.withLock { state -> String? in
            guard state.subscriptions[layer]?.descriptor === descriptor else { return nil }
            state.subscriptions[layer]?.subscribed = nil
            return state.streamID
        }
        if let streamID { subscribe(layer, on: streamID, context: descriptor.context) }
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
    }

    /// `POST .../subscriptions` for `layer` on the control queue, with the layer's current
    /// token, epoch and committed cursor; retried with backoff while the stream stays the same.
    private func subscribe(_ layer: StreamLayer, on streamID: String, context: ClientContext, attempt: Int = 0) {
        controlQueue.async { [self] in
            let found = state.withLock { state -> (Subscription, String)? in
                guard !state.shutDown, state.streamID == streamID, let path = state.path,
                      let subscription = state.subscriptions[layer] else { return nil }
                return (subscription, path)
            }
            guard let (subscription, path) = found else { return }
            let descriptor = subscription.descriptor
            let token = descriptor.jwt
            do throws(LayerSyncError) {
                let epoch = try descriptor.store.epoch()  // before `since`, as the long-poll reads them
                let since = try descriptor.store.since()
                _ = try context.server.subscribe(path: path, streamID: streamID, documentID: layer.documentID, layer: layer.layer,
                                                 since: since, epoch: epoch, jwt: token, session: controlSession,
                                                 cancellation: context.lifetime)
                state.withLock { state in
                    guard state.subscriptions[layer]?.generation == subscription.generation else { return }
                    state.subscriptions[layer]?.subscribed = (streamID, token)
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
            } catch {
                let delay = DocumentDescriptor.backoffSeconds(failures: attempt + 1)
                controlQueue.asyncAfter(deadline: .now() + delay) { [self] in
                    subscribe(layer, on: streamID, context: context, attempt: attempt + 1)
                }
            }
        }
    }

    // MARK: The stream

    /// Ends the loop: aborts the stream, drops every subscription, wakes the backoff.
    func shutdown() {
        state.withLock { state in
            state.shutDown = true
            state.subscriptions = [:]
            state.transfer?.cancel()
        }
        wakeUp()
    }

    /// Wakes the loop's backoff or its wait for the network.
    func wakeUp() { wake.value.signal() }

    /// Waits until the loop and the control queue have finished what they were running.
    func waitUntilIdle() {
        loopQueue.sync {}
        controlQueue.sync {}
    }

    private func pause(_ seconds: Double) { _ = wake.value.wait(timeout: .now() + seconds) }

    /// The loop (on the stream's queue: the client's one listener thread): opens the stream
    /// with a listening layer's token and reads it until it ends, then again after a backoff,
    /// until no layer listens any more, the client shuts down, or it falls back.
    private func run(_ context: ClientContext) {
        while true {
            let next = state.withLock { state -> (transfer: TransferCancellation, subscription: Subscription)? in
                guard !state.shutDown, !context.isShutDown, state.fallbackReason == nil,
                      let first = state.subscriptions.values.first(where: { !$0.descriptor.isTokenRejected }) ?? state.subscriptions.values.first else {
                    state.loopRunning = false
                    return nil
                }
                let transfer = TransferCancellation()
                state.transfer = transfer
                return (transfer, first)
            }
            guard let (transfer, subscription) = next else { return }
            let descriptor = subscription.descriptor
            defer { state.withLock { state in state.transfer = nil } }
            guard context.server.isNetworkAvailable else {
                pause(DocumentDescriptor.maximumBackoffSeconds)
                continue
            }
            guard let (path, heartbeat) = streamEndpoint(context, cancellation: transfer) else { continue }
            let token = descriptor.jwt
            do throws(LayerSyncError) {
                let end = try context.server.openStream(path: path, jwt: token, stallSeconds: max(1, Int((2 * heartbeat).rounded(.up))), session: streamSession,
                                                        cancellation: transfer) { [self] message in
                    handle(message, context: context)
                }
                streamEnded()
                switch end {
                case .noHello:
                    fallBack("no hello within \(Int(SyncServer.streamHelloTimeoutSeconds)) s of opening the change stream "
                             + "(something between client and server buffers it)", context: context)
                    return
                case .stopped, .closed: backOff()
                }
            } catch where error.code == .cancelled {
                streamEnded()  // the last layer stopped listening, or shutdown: the loop's check decides
            } catch where error.code == .accessDenied && error.httpStatus != nil {
                // The token is refused here as it would be for its layer: that layer stops, the next one's token is tried.
                streamEnded()
                forget(descriptor, generation: subscription.generation)
                descriptor.streamFailedAuthentication(error, token: token, generation: subscription.generation)
            } catch where error.httpStatus == 404 || error.httpStatus == 405 {
                streamEnded()
                fallBack("the server answers \(error.httpStatus ?? 0) to POST \(path)", context: context)
                return
            } catch {
                streamEnded()
                backOff()
            }
        }
    }

    /// The stream's path and heartbeat period from the server info (asked for when the
    /// connection sequence has not answered yet); `nil` after a fallback or a failure (backed off).
    private func streamEndpoint(_ context: ClientContext, cancellation: TransferCancellation) -> (String, Double)? {
        if let known = state.withLock({ state in state.path.map { ($0, state.heartbeatSeconds) } }) { return known }
        var info = context.serverInfo.withLock { $0 }
        if info == nil {
            do throws(LayerSyncError) {
                info = try context.server.info(session: streamSession, cancellation: cancellation)
            } catch {
                if error.code != .cancelled { backOff() }
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

    private func backOff() {
        let failures = state.withLock { state in
            state.failures += 1
            return state.failures
        }
        pause(DocumentDescriptor.backoffSeconds(failures: failures))
    }

    /// The stream ended: no subscription holds any more (each resubscribes on the next `hello`).
    private func streamEnded() {
        state.withLock { state in
            state.streamID = nil
            for layer in state.subscriptions.keys { state.subscriptions[layer]?.subscribed = nil }
        }
    }

    /// Listening moves to long-polls for good: every subscribed layer starts its own loop.
    private func fallBack(_ reason: String, context: ClientContext) {
        let moved = state.withLock { state -> [Subscription] in
            guard state.fallbackReason == nil else { return [] }
            state.fallbackReason = reason
            state.loopRunning = false
            defer { state.subscriptions = [:] }
            return Array(state.subscriptions.values)
        }
        let line = "layersync: \(context.server.url.base): listening falls back to per-layer long-poll: \(reason)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
        for subscription in moved { subscription.descriptor.switchToLongPoll(from: subscription.generation) }
    }

    /// One event, on the stream's thread; what it does to a layer goes to that layer's work queue.
    /// - Returns: Whether to go on reading.
    private func handle(_ message: StreamMessage, context: ClientContext) -> Bool {
        func subscription(_ layer: StreamLayer) -> Subscription? { state.withLock { $0.subscriptions[layer] } }
        switch message {
        case .hello(let streamID):
            let layers = state.withLock { state -> [StreamLayer] in
                state.streamID = streamID
                state.failures = 0
                return Array(state.subscriptions.keys)
            }
            for layer in layers { subscribe(layer, on: streamID, context: context) }
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
