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
