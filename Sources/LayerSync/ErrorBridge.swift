import CLayerSync
import LayerSyncCore
import LayerSyncModel

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Translates core errors into `layersync_error` and return codes: the only place where a
/// Swift `LayerSyncError` crosses into C.
enum ErrorBridge {
    /// Runs `body`; returns `LAYERSYNC_OK`, or the error's code after filling `error`.
    static func run(_ error: UnsafeMutablePointer<layersync_error>?, _ body: () throws(LayerSyncError) -> Void) -> Int32 {
        do {
            try body()
            return 0
        } catch let failure {
            fill(error, with: failure)
            return failure.code.rawValue
        }
    }

    /// Fills a caller-owned `layersync_error`, freeing strings a previous failure left in it.
    static func fill(_ error: UnsafeMutablePointer<layersync_error>?, with failure: LayerSyncError) {
        guard let error else { return }
        clear(error)
        error.pointee.code = failure.code.rawValue
        error.pointee.message = CString.copy(failure.message)
        error.pointee.sqlite_extended_code = failure.sqliteExtendedCode ?? 0
        error.pointee.http_status = Int32(failure.httpStatus ?? 0)
        error.pointee.document_id = failure.documentID.map(CString.copy)
        error.pointee.record_id = failure.recordID.map(CString.copy)
        error.pointee.attachment_id = failure.attachmentID.map(CString.copy)
    }

    /// Frees the strings of `error` and resets it, keeping (or setting) its version.
    static func clear(_ error: UnsafeMutablePointer<layersync_error>) {
        free(error.pointee.message)
        free(error.pointee.document_id)
        free(error.pointee.record_id)
        free(error.pointee.attachment_id)
        let version = error.pointee.version == 0 ? UInt32(LAYERSYNC_ERROR_VERSION) : error.pointee.version
        error.pointee = layersync_error(
            version: version, code: 0, message: nil, sqlite_extended_code: 0, http_status: 0,
            document_id: nil, record_id: nil, attachment_id: nil)
    }

    /// Calls `body` with a temporary `layersync_error` describing `failure`, freed afterwards.
    /// Used to hand errors to callbacks, where the pointer is valid only during the call.
    static func withTemporary<R>(_ failure: LayerSyncError, _ body: (UnsafePointer<layersync_error>) -> R) -> R {
        var error = layersync_error()
        error.version = UInt32(LAYERSYNC_ERROR_VERSION)
        fill(&error, with: failure)
        defer { clear(&error) }
        return withUnsafePointer(to: &error) { body($0) }
    }
}
