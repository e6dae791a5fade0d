import CLayerSync
import LayerSyncCore
import LayerSyncModel

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Conversions between C strings and Swift strings at the ABI boundary.
///
/// Strings coming in must be NUL-terminated, valid UTF-8 (docs/rules.md rule 9);
/// strings going out are `malloc`ed copies the caller frees with `layersync_free`.
enum CString {
    /// Reads a required UTF-8 argument.
    /// - Throws: `.invalidArgument` when `pointer` is NULL or not valid UTF-8.
    static func read(_ pointer: UnsafePointer<CChar>?, _ name: StaticString) throws(LayerSyncError) -> String {
        guard let pointer else {
            throw LayerSyncError(.invalidArgument, "\(name) must not be NULL")
        }
        guard let text = String(validatingCString: pointer) else {
            throw LayerSyncError(.invalidArgument, "\(name) is not valid UTF-8")
        }
        return text
    }

    /// Reads an optional UTF-8 argument (NULL gives nil).
    /// - Throws: `.invalidArgument` when it is not valid UTF-8.
    static func readOptional(_ pointer: UnsafePointer<CChar>?, _ name: StaticString) throws(LayerSyncError) -> String? {
        guard pointer != nil else { return nil }
        return try read(pointer, name)
    }

    /// A `malloc`ed, NUL-terminated copy of `text`, owned by the caller.
    static func copy(_ text: String) -> UnsafeMutablePointer<CChar> {
        guard let copy = strdup(text) else { fatalError("layersync: out of memory") }
        return copy
    }

    /// Stores a copy of `text` in `out` when `out` is not NULL.
    static func store(_ text: String?, in out: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) {
        guard let out else { return }
        out.pointee = text.map(copy)
    }
}
