import LayerSyncModel
import LayerSyncTransport

/// The sync cycles of one descriptor (``DocumentDescriptor/sync()``), kept under the
/// descriptor's lock: whether a cycle is queued, how to abort the running one, what it is doing
/// (the state it reports), the timer of automatic syncs (the debounce after an edit, or the
/// retry after an answer the checks refused), and how the last ones ended.
///
/// Cycles run on the descriptor's serial work queue, so at most one runs at a time. At most
/// one more waits queued: a request while one is queued merges into it, a request while one
/// runs (but none is queued) queues the next, so edits made during a cycle are synced by the
/// next one. There is one timer for the debounce and the retry, with a generation like the
/// listener: arming it (either way) or stopping it makes a new one, and a timer that fires for
/// an older generation does nothing; so an edit's debounce replaces a pending retry.
struct SyncCycle: Sendable {
    /// Debounce in seconds between a local edit and the automatic sync it triggers; negative
    /// (`LAYERSYNC_SYNC_DISABLED`) turns automatic sync off.
    var delay: Double
    /// Whether a cycle waits on the work queue and has not begun yet.
    private(set) var isQueued = false
    /// `.sendingChanges` / `.receivingChanges` while a cycle runs, `nil` between cycles.
    private(set) var activity: DocumentState?
    /// Whether the last cycle failed because the server could not be reached
    /// (`.requestFailed`); the network coming back starts a cycle then.
    private(set) var lastFailedOffline = false
    /// Cycles in a row that ended on an answer the checks refused or a 5xx (the retry's backoff).
    private(set) var invalidAnswersInARow = 0
    /// The timer's current generation.
    private var debounceGeneration = 0
    /// Aborts the running cycle's requests; `nil` between cycles.
    private var cancellation: TransferCancellation?

    /// - Parameter delay: The debounce of automatic syncs (the client configuration's `syncDelay`).
    init(delay: Double) { self.delay = delay }

    /// Whether local edits start automatic syncs (``delay`` is not negative).
    var isAutomatic: Bool { delay >= 0 }

    // MARK: Queueing and running

    /// Queues a cycle unless one is queued already (the request then merges into it).
    /// - Returns: Whether the caller must enqueue the new cycle on the work queue.
    mutating func request() -> Bool {
        guard !isQueued else { return false }
        isQueued = true
        return true
    }

    /// The queued cycle begins on the work queue: later requests queue the next one.
    /// - Parameter cancellation: Aborts the cycle's requests (``stop(cancelCurrentRequest:)``, ``cancel()``).
    mutating func begin(cancellation: TransferCancellation) {
        isQueued = false
        self.cancellation = cancellation
    }

    /// Sets what the running cycle does (`.sendingChanges`, `.receivingChanges`), or `nil` when it ends.
    mutating func setActivity(_ activity: DocumentState?) { self.activity = activity }

    /// Records how the running cycle ended.
    /// - Parameter failedOffline: Whether it failed because the server could not be reached.
    mutating func finish(failedOffline: Bool) { lastFailedOffline = failedOffline }

    /// Counts a cycle that ended on an answer the checks refused (`.invalidServerData`).
    /// - Returns: Such cycles in a row, this one included.
    mutating func noteInvalidAnswer() -> Int {
        invalidAnswersInARow += 1
        return invalidAnswersInARow
    }

    /// A cycle ended any other way: the count of refused answers in a row starts again.
    mutating func resetInvalidAnswers() { invalidAnswersInARow = 0 }

    /// The running cycle has returned: nothing is left to abort.
    mutating func end() { cancellation = nil }

    // MARK: The timer of automatic syncs

    /// Arms the debounce timer after a local edit, replacing one armed before.
    /// - Returns: The new timer's generation and delay in seconds, or `nil` when automatic sync is off.
    mutating func armDebounceTimer() -> (generation: Int, delay: Double)? {
        guard isAutomatic else { return nil }
        debounceGeneration += 1
        return (debounceGeneration, delay)
    }

    /// Arms the timer to retry after an answer the checks refused, replacing one armed before.
    /// - Parameter delay: The backoff in seconds.
    /// - Returns: The new timer's generation and delay, or `nil` when automatic sync is off.
    mutating func armRetryTimer(delay: Double) -> (generation: Int, delay: Double)? {
        guard isAutomatic else { return nil }
        debounceGeneration += 1
        return (debounceGeneration, delay)
    }

    /// Whether the timer of `generation` is still the armed one (so when it fires it requests a cycle).
    func isArmedDebounceTimer(_ generation: Int) -> Bool { debounceGeneration == generation }

    /// Disarms the timer, debounce or retry (it fires without effect); later edits arm it again.
    mutating func disarmDebounceTimer() { debounceGeneration += 1 }

    // MARK: Stopping

    /// Stops automatic syncing that is scheduled and, if asked, the running cycle's request
    /// (``DocumentDescriptor/stopSyncing(cancelCurrentRequest:)``).
    mutating func stop(cancelCurrentRequest: Bool) {
        disarmDebounceTimer()
        if cancelCurrentRequest { cancellation?.cancel() }
    }

    /// Stops everything for shutdown: the running cycle's request aborts at once, the timer is disarmed.
    mutating func cancel() {
        cancellation?.cancel()
        disarmDebounceTimer()
    }
}
