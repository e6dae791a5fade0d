
/// Whether a client may attempt requests: two flags kept apart so that neither silently undoes
/// the other (docs/threading.md §8). Only the host's explicit call moves `hostSaysAvailable`;
/// the reachability hint's answers move only `hintSaysOffline` (and an explicit "available"
/// clears it, so the host's latest explicit word always wins; `hostWords` tells an answer
/// asked for before that word, which must not undo it).
package struct NetworkAvailability: Sendable, Equatable {
    /// The host's last explicit setting (``SyncClient/setNetworkAvailable(_:)``); initially `true`.
    package var hostSaysAvailable = true
    /// The reachability hint's last answer was `false`; initially `false`.
    package var hintSaysOffline = false
    /// How many explicit calls the host made so far. An ask of the hint queued before the latest
    /// one answers for a failure that call superseded, so its answer is dropped.
    package var hostWords: UInt64 = 0
    /// Whether requests may be attempted.
    var isUsable: Bool { hostSaysAvailable && !hintSaysOffline }
}
