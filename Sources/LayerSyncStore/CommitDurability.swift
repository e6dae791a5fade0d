
/// How a layer store transaction commits: with an fsync (`synchronous=FULL`) or without one
/// (`synchronous=NORMAL`). The store runs in WAL mode, where SQLite lets a connection switch
/// `PRAGMA synchronous` between transactions (https://sqlite.org/pragma.html#pragma_synchronous).
///
/// Why a relaxed commit is safe for the writes the engine makes on its own (docs/durability.md):
/// - An app crash (kill -9) loses nothing committed in either mode: the WAL frames are in the
///   OS page cache, which survives the process.
/// - After a power loss the WAL keeps a *prefix* of the committed transactions: frames carry a
///   cumulative checksum, and recovery stops at the first frame that does not match
///   (https://sqlite.org/walformat.html). So a relaxed commit is lost only together with every
///   later commit, and a `.full` commit makes every earlier relaxed one durable (its fsync covers
///   the whole WAL file; frames already checkpointed are in the synced database file).
/// - Server data lost that way is fetched again: the revision cursor (`since`) commits in the
///   same transaction as the records.
/// - A lost accepted/rejected answer leaves the change queued; it is resent with the same change
///   id and the server answers with its recorded outcome (docs/rules.md rule 2).
/// - A lost freeze (``LayerStore/takeBatch(_:_:)``) is the one hazard: the change may have
///   reached the server, and a later local edit coalesced into the no-longer-frozen row would go
///   out under a change id the server has already applied (and be dropped as a duplicate).
///   ``LayerStore`` therefore seals every unfrozen change in one `.full` transaction when it
///   opens, before any sync (``LayerStore/sealPendingChanges(_:)``); an edit coalesces only into
///   a row that was unfrozen *durably*, and such a row cannot have been sent.
///
/// Every write made by a public API call (create/update/delete a record, attachments, meta the
/// host sets) commits with the store's ``LayerStore/localWriteDurability``: `.full` by default
/// (docs/rules.md rule 1: durable when the call returns), `.relaxed` when the client asked for it
/// (``ClientConfiguration/localWriteDurability``, C `LAYERSYNC_DURABILITY_NORMAL`). Then a batch
/// holding a relaxed API write that no FULL commit has covered yet is frozen `.full`, so that
/// nothing is sent before it is durable here.
public enum CommitDurability: Sendable, Equatable {
    /// Committed with an fsync of the WAL (`synchronous=FULL`): durable when the commit returns.
    case full
    /// Committed without an fsync (`synchronous=NORMAL`): survives an app crash; after a power
    /// loss it may be lost, but only with every later commit and never after a later `.full` one.
    case relaxed
}
