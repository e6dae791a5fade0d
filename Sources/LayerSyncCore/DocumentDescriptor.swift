import Dispatch
import LayerSyncModel
import LayerSyncStore
import LayerSyncTransport
import Synchronization

/// One document layer of a ``SyncClient`` (Instant's `InstantDocumentDescriptor`): its
/// download, authentication, sync state and local records.
///
/// Obtained from ``SyncClient/document(forJWT:)``; the same (document id, layer) gives the
/// same instance. Every method may be called from any thread, including the event handler.
///
/// Work runs on two serial queues per descriptor: the work queue (download, sync cycles,
/// reauthentication, applying change stream pages and long-poll answers — so store updates
/// from the server never interleave) and the listen queue (the blocking long-poll loop, used
/// only once the client fell back to long-polls: on the change stream, the client's one
/// listener thread, ``StreamListener``, serves every descriptor).
public final class DocumentDescriptor: Sendable {
    /// The document id (from the JWT's `document_id`).
    public let documentID: String
    /// The layer name (`""` is the default layer).
    public let layerName: String

    let context: ClientContext
    let store: LayerStore
    let workQueue: DispatchQueue
    let listenQueue: DispatchQueue
    let workSession: HTTPSession
    /// The long-poll loop's session, made when the first loop needs it (on the change stream there is none).
    private let listenSessionSlot = Mutex<HTTPSession?>(nil)
    let pdfFilePath: String
    let mutableState: Mutex<MutableState>
    /// Ids of the conflict reports emitted in a `didRejectChanges` event that the handler has
    /// not returned from yet (DocumentDescriptor+RejectionReports.swift); its lock also
    /// serialises every delivery, so a report is never emitted twice by one process.
    let reportsInDelivery = Mutex<Set<String>>([])

    /// Everything that changes, guarded by `mutableState`.
    struct MutableState: Sendable {
        /// The token in use, its rejection and reauthentication (``Authentication``).
        var authentication: Authentication
        /// Set while a download runs.
        var download: TransferCancellation?
        /// Queued and running sync cycles, their activity, the debounce and retry timer (``SyncCycle``).
        var syncCycle: SyncCycle
        /// The long-poll loop (``Listener``).
        var listener = Listener()
        /// The one-shot server operation running on the work queue (history, rollback, ...).
        var operation: TransferCancellation?
        /// Set while ``attemptContentMigration()`` runs.
        var migratingContent = false
        /// Set while the reset for a database migration runs (``attemptContentMigration()``).
        var resettingDatabase = false
        var lastReportedState: DocumentState = .unknown
        var invalid = false
        /// Whether `document.pdf` was seen on disk (see ``isDownloaded``).
        var pdfSeen = false
    }

    init(claims: JWTClaims, context: ClientContext) throws(LayerSyncError) {
        documentID = claims.documentID
        layerName = claims.layerName
        self.context = context
        let directory = context.layout.layerDirectory(claims.documentID, layer: claims.layerName)
        store = try LayerStore.open(directory: directory, localWriteDurability: context.configuration.localWriteDurability)
        pdfFilePath = context.layout.pdfPath(claims.documentID)
        // A store that needs a reset for a database migration has no connection: nothing is
        // read or written until the reset recreated it (the pins are written then).
        let needsReset = store.needsDatabaseReset
        let pinned = needsReset ? nil : try store.meta("user_id")
        if let pinned, let user = claims.userID, user != pinned {
            throw LayerSyncError(.userIDMismatch, "the JWT's user_id '\(user)' differs from '\(pinned)' pinned to the local layer",
                                 documentID: claims.documentID)
        }
        if !needsReset, pinned == nil, let user = claims.userID { try store.setMeta("user_id", user) }
        // Names for listing local storage (directory names may be hashed keys).
        if !needsReset, try store.meta("document_id") == nil {
            try store.setMeta("document_id", claims.documentID)
            try store.setMeta("layer_name", claims.layerName)
        }
        let label = "layersync.document.\(claims.documentID).\(claims.layerName)"
        workQueue = DispatchQueue(label: label + ".work")
        listenQueue = DispatchQueue(label: label + ".listen")
        workSession = HTTPSession(connectTimeoutSeconds: context.configuration.connectTimeout)
        mutableState = Mutex(MutableState(authentication: Authentication(claims: claims),
                                          syncCycle: SyncCycle(delay: context.configuration.syncDelay)))
        if needsReset {
            // Reported once through didChangeSyncState.
            publishState()
        } else {
            let initial = computeState(pending: (try? store.pendingCount()) ?? 0, downloaded: isDownloaded, activity: nil, invalid: false,
                                       needsMigration: store.needsContentMigration)
            mutableState.withLock { $0.lastReportedState = initial }
            // Reports an earlier process committed but died before its handler returned from.
            workQueue.async { [self] in deliverUndeliveredRejections() }
        }
    }

    /// The user the layer is pinned to (the JWT's `user_id`), if any.
    public var userID: String? {
        mutableState.withLock { $0.authentication.claims.userID } ?? (try? store.meta("user_id")) ?? nil
    }

    /// The long-poll loop's session (``listenSessionSlot``).
    var listenSession: HTTPSession {
        listenSessionSlot.withLock { slot in
            if let session = slot { return session }
            let session = HTTPSession(connectTimeoutSeconds: context.configuration.connectTimeout)
            slot = session
            return session
        }
    }

    /// The current token.
    var jwt: String { mutableState.withLock { $0.authentication.token } }

    /// The current state (``DocumentState``).
    public var state: DocumentState {
        let pending = (try? store.pendingCount()) ?? 0
        let downloaded = isDownloaded
        let needsMigration = store.needsContentMigration
        let needsReset = store.needsDatabaseReset
        return mutableState.withLock {
            computeState(pending: pending, downloaded: downloaded, activity: Self.activity($0), invalid: $0.invalid,
                         needsMigration: needsMigration, needsReset: needsReset)
        }
    }

    /// Whether the PDF and the layer snapshot are stored locally.
    public var isDownloaded: Bool {
        guard (try? store.isDownloaded()) ?? false else { return false }
        // Once seen, the PDF stays (a layer store references it; only storage removal, which
        // closes the store, deletes it), so hot paths stat it once rather than per call.
        if mutableState.withLock({ $0.pdfSeen }) { return true }
        guard StorageLayout.fileExists(pdfFilePath) else { return false }
        mutableState.withLock { $0.pdfSeen = true }
        return true
    }

    /// Whether the caller runs on the owning client's event thread (inside the event handler).
    public var isOnEventQueue: Bool { context.events.isCurrent }

    /// Whether a download runs.
    var isDownloading: Bool { mutableState.withLock { $0.download != nil } }

    /// Whether the local storage was removed (state `.invalid`).
    var isInvalid: Bool { mutableState.withLock { $0.invalid } }

    /// Whether local changes wait to be accepted by the server.
    public var hasUnsyncedChanges: Bool { ((try? store.pendingCount()) ?? 0) > 0 }

    /// Path of the downloaded PDF, `nil` until downloaded.
    public var pdfPath: String? { isDownloaded ? pdfFilePath : nil }

    /// Debounce in seconds between a local edit and the automatic sync it triggers;
    /// negative (`LAYERSYNC_SYNC_DISABLED`) turns automatic sync off. Defaults to the
    /// client configuration's `syncDelay`.
    public var syncDelay: Double {
        get { mutableState.withLock { $0.syncCycle.delay } }
        set { mutableState.withLock { $0.syncCycle.delay = newValue } }
    }

    // MARK: State reporting

    private static func activity(_ state: MutableState) -> DocumentState? {
        if state.resettingDatabase { return .resettingForDatabaseMigration }
        return state.migratingContent ? .migratingContent : state.syncCycle.activity
    }

    private func computeState(pending: Int, downloaded: Bool, activity: DocumentState?, invalid: Bool,
                              needsMigration: Bool, needsReset: Bool = false) -> DocumentState {
        if invalid { return .invalid }
        if let activity { return activity }
        if needsReset { return .needsResetForDatabaseMigration }
        if needsMigration { return .needsContentMigration }
        if !downloaded { return .unknown }
        return pending > 0 ? .dirty : .clean
    }

    /// Recomputes the state and emits `didChangeSyncState` if it differs from the last one reported.
    func publishState() {
        let pending = (try? store.pendingCount()) ?? 0
        let downloaded = isDownloaded
        let needsMigration = store.needsContentMigration
        let needsReset = store.needsDatabaseReset
        mutableState.withLock { state in
            let current = computeState(pending: pending, downloaded: downloaded, activity: Self.activity(state), invalid: state.invalid,
                                       needsMigration: needsMigration, needsReset: needsReset)
            guard current != state.lastReportedState else { return }
            state.lastReportedState = current
            context.events.emit(.didChangeSyncState(self, current))
        }
    }

    /// Emits an event of this client (never under a lock of the caller's choosing: `emit` only enqueues).
    func emit(_ event: ClientEvent) { context.events.emit(event) }

    /// Emits `didRejectChanges` / `didReceiveChanges` for a non-empty outcome (its rejections
    /// are stored reports, see ``deliverRejections(_:)``).
    func report(_ outcome: ServerChangeOutcome) {
        if !outcome.rejections.isEmpty { deliverRejections(outcome.rejections) }
        if !outcome.changes.isEmpty { emit(.didReceiveChanges(self, outcome.changes)) }
    }

    func requireDownloaded() throws(LayerSyncError) {
        if mutableState.withLock({ $0.invalid }) {
            throw LayerSyncError(.invalidState, "the document's local storage was removed", documentID: documentID)
        }
        if mutableState.withLock({ $0.migratingContent || $0.resettingDatabase }) {
            throw LayerSyncError(.performingContentMigration, "a content migration is running", documentID: documentID)
        }
        if store.needsDatabaseReset {
            throw LayerSyncError(.contentMigrationNeeded,
                                 "the local layer store has a newer schema than this library; call attemptContentMigration() to reset it",
                                 documentID: documentID)
        }
        guard try store.isDownloaded() else {
            throw LayerSyncError(.notDownloaded, "download the document first", documentID: documentID)
        }
        if store.needsContentMigration {
            throw LayerSyncError(.contentMigrationNeeded, "the local records use an older content format; call attemptContentMigration()",
                                 documentID: documentID)
        }
    }

    // MARK: Lifecycle

    /// Cancels every running transfer and timer of this descriptor (shutdown).
    func cancelAllWork() {
        mutableState.withLock { state in
            state.download?.cancel()
            state.syncCycle.cancel()
            state.operation?.cancel()
            state.listener.cancel()
        }
    }

    /// Waits until the work and listen queues have finished what they were running.
    func waitUntilIdle() {
        workQueue.sync {}
        listenQueue.sync {}
    }

    /// Called when the network becomes available again: resumes pending syncs and wakes long-polls.
    func networkDidBecomeAvailable() {
        let (resume, auto) = mutableState.withLock { state in
            state.listener.wakeUp()
            return (state.syncCycle.lastFailedOffline, state.syncCycle.isAutomatic && !state.authentication.isTokenRejected)
        }
        if resume || (auto && hasUnsyncedChanges && isDownloaded) { requestSyncCycle() }
    }
}
