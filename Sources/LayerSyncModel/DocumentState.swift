/// The sync state of a document layer, with Instant's raw values (docs/architecture.md §4).
public enum DocumentState: Int32, Sendable, CustomStringConvertible {
    /// Not downloaded yet, or not known.
    case unknown = 0
    /// Local content needs a migration before use (reserved; not produced yet).
    case needsContentMigration
    /// A content migration is running (reserved).
    case migratingContent
    /// The local store has a schema newer than this library; ``DocumentDescriptor/attemptContentMigration()`` resets it.
    case needsResetForDatabaseMigration
    /// The local store is being reset (salvage, recreate, re-download, re-queue).
    case resettingForDatabaseMigration
    /// Downloaded, idle, nothing pending.
    case clean
    /// Downloaded, idle, with local changes not yet accepted by the server.
    case dirty
    /// A sync cycle is sending local changes.
    case sendingChanges
    /// A sync cycle is applying server changes.
    case receivingChanges
    /// The local storage was removed; the descriptor is unusable.
    case invalid

    public var description: String {
        switch self {
        case .unknown: "unknown"
        case .needsContentMigration: "needsContentMigration"
        case .migratingContent: "migratingContent"
        case .needsResetForDatabaseMigration: "needsResetForDatabaseMigration"
        case .resettingForDatabaseMigration: "resettingForDatabaseMigration"
        case .clean: "clean"
        case .dirty: "dirty"
        case .sendingChanges: "sendingChanges"
        case .receivingChanges: "receivingChanges"
        case .invalid: "invalid"
        }
    }
}
