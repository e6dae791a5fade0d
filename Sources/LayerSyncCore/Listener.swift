import Dispatch
import LayerSyncTransport

/// The listening of one descriptor (``DocumentDescriptor/startListening()``), kept under the
/// descriptor's lock: whether it should run, which run is the current one (every start and
/// stop makes a new generation, so a loop or subscription that was stopped ends at its next
/// check even if it was started again meanwhile), and, for a long-poll loop, how to abort its
/// request and wake its backoff. A run on the client's change stream (``StreamListener``) has
/// no loop of its own: its subscription carries the generation.
struct Listener: Sendable {
    /// Whether a loop should run.
    private(set) var isRunning = false
    /// Whether the last loop was stopped by an auth failure; a successful reauthentication
    /// starts it again.
    private(set) var stoppedByAuth = false
    /// The current loop's generation.
    private(set) var generation = 0
    /// Aborts the current loop's request.
    private var cancellation: TransferCancellation?
    /// Wakes the current loop from its backoff or its wait for the network.
    private var wake: UncheckedSendable<DispatchSemaphore>?

    /// Starts listening on the client's change stream unless listening already.
    /// - Returns: The new run's generation, or `nil` when listening already.
    mutating func startStreaming() -> Int? {
        guard !isRunning else { return nil }
        isRunning = true
        stoppedByAuth = false
        generation += 1
        cancellation = nil
        wake = nil
        return generation
    }

    /// Moves the stream run of `generation` to a long-poll loop (the stream fell back).
    /// - Returns: The loop's generation, or `nil` when that run is no longer the current one.
    mutating func switchToLongPoll(from generation: Int, cancellation: TransferCancellation, wake: DispatchSemaphore) -> Int? {
        guard isCurrent(generation) else { return nil }
        self.generation += 1
        self.cancellation = cancellation
        self.wake = UncheckedSendable(wake)
        return self.generation
    }

    /// Moves the current long-poll loop back to the client's change stream (the stream came
    /// back, or took the subscription it had refused): its request aborts and its wait ends.
    /// - Returns: The stream run's generation, or `nil` when no long-poll loop runs.
    mutating func switchToStream() -> Int? {
        guard isRunning, let loop = cancellation else { return nil }
        loop.cancel()
        wakeUp()
        cancellation = nil
        wake = nil
        generation += 1
        return generation
    }

    /// Whether the loop of `generation` is the current one and should go on.
    func isCurrent(_ generation: Int) -> Bool { isRunning && self.generation == generation }

    /// Stops the loop at the host's request: its request aborts at once, its wait ends, and a
    /// reauthentication does not start it again.
    mutating func stop() {
        cancel()
        stoppedByAuth = false
    }

    /// Stops the loop for shutdown: its request aborts at once and its wait ends.
    mutating func cancel() {
        isRunning = false
        generation += 1
        cancellation?.cancel()
        wakeUp()
    }

    /// Records that the loop of `generation` ended on an auth failure (it returns by itself),
    /// unless it was already stopped or replaced.
    mutating func stopForAuthFailure(generation: Int) {
        guard self.generation == generation else { return }
        isRunning = false
        stoppedByAuth = true
    }

    /// Records that the loop of `generation` ended because the server no longer has the
    /// document or layer (404: deleted); a reauthentication does not start it again.
    /// - Returns: Whether that loop was the current one (so its end is reported once).
    mutating func stopForMissingLayer(generation: Int) -> Bool {
        guard isCurrent(generation) else { return false }
        isRunning = false
        stoppedByAuth = false
        return true
    }

    /// Wakes the current loop's wait (the network came back).
    func wakeUp() { wake?.value.signal() }
}
