import CLayerSync

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one place where the C ABI asserts sendability the compiler cannot check.
///
/// A `layersync_client_delegate` holds C function pointers and an opaque `context`
/// pointer. The library only ever calls them from the client's serial callback thread,
/// and the header tells hosts that `context` is used from that thread; that contract,
/// not the type system, makes sharing the copy safe.
struct DelegateTable: @unchecked Sendable {
    var table: layersync_client_delegate
}

/// An immutable, `malloc`ed C string owned by a handle or by the library, freed on deinit.
/// Never written after creation, so sharing it across threads is safe.
final class OwnedCString: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<CChar>
    init(_ text: String) { pointer = CString.copy(text) }
    deinit { free(pointer) }
    /// The pointer as handed to C (`const char *`), valid while this object lives.
    var cString: UnsafePointer<CChar> { UnsafePointer(pointer) }
}

/// A `layersync_document_observer` copy; same contract as ``DelegateTable``.
struct ObserverTable: @unchecked Sendable {
    var table: layersync_document_observer
}

/// The state of one observer's callbacks, guarded by a pthread mutex and condition
/// variable (so that removal from another thread can wait for a running callback).
/// The mutex is only held for flag updates, never while a callback runs.
final class CallbackGate: @unchecked Sendable {
    enum Removal { case releaseNow, deferred, alreadyRemoved }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var removed = false
    private var running = false
    private var releaseDeferred = false

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Marks a callback as running unless the observer was removed.
    /// - Returns: Whether the callback may run.
    func enter() -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if removed { return false }
        running = true
        return true
    }

    /// Marks the callback as finished and wakes a waiting remover.
    /// - Returns: Whether the observer was removed from inside the callback, so that the
    ///   caller must now call `release_context`.
    func leave() -> Bool {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        running = false
        pthread_cond_broadcast(condition)
        let release = releaseDeferred
        releaseDeferred = false
        return release
    }

    /// Marks the observer removed; no callback starts afterwards.
    /// - Parameter wait: Wait for a running callback (false on the callback thread itself).
    /// - Returns: Who calls `release_context`: the caller now, or ``leave()`` later.
    func remove(wait: Bool) -> Removal {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if removed { return .alreadyRemoved }
        removed = true
        if running {
            if !wait {
                releaseDeferred = true
                return .deferred
            }
            while running { pthread_cond_wait(condition, mutex) }
        }
        return .releaseNow
    }
}

/// A result callback and its context, captured by the completion of a one-shot server
/// operation; same contract as ``DelegateTable`` (called once, on the callback thread).
struct ResultCallback: @unchecked Sendable {
    var callback: layersync_document_result_cb
    var context: UnsafeMutableRawPointer?
}

/// A `layersync_document *` captured by a completion; the handle it points to is kept alive
/// by the completion (see `startOperation`).
struct UncheckedDocumentPointer: @unchecked Sendable {
    var value: OpaquePointer
}
