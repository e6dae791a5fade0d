import CLayerSync
import LayerSyncModel

/// The guard of every export's out-parameters, in one place: a required one that is NULL is
/// refused with `INVALID_ARGUMENT` ("`name` must not be NULL"), and each one given is cleared
/// before any work, so that a failing call always leaves NULL (or an empty struct) there. The
/// export fills it only once the call succeeds.
enum OutParameter {
    /// A required `T **out` (a C string, a handle): checked and set to NULL.
    /// - Parameters:
    ///   - pointer: The caller's out-pointer.
    ///   - name: Its name in include/layersync.h, for the error message.
    /// - Returns: The pointer, known not to be NULL.
    /// - Throws: `.invalidArgument` when it is NULL.
    static func required<Pointee>(_ pointer: UnsafeMutablePointer<Pointee?>?, _ name: StaticString)
        throws(LayerSyncError) -> UnsafeMutablePointer<Pointee?> {
        guard let pointer else { throw LayerSyncError(.invalidArgument, "\(name) must not be NULL") }
        pointer.pointee = nil
        return pointer
    }

    /// An optional `T **out` (NULL: the caller does not want the value): set to NULL when given.
    /// - Parameter pointer: The caller's out-pointer, or NULL.
    /// - Returns: `pointer`.
    static func optional<Pointee>(_ pointer: UnsafeMutablePointer<Pointee?>?) -> UnsafeMutablePointer<Pointee?>? {
        pointer?.pointee = nil
        return pointer
    }

    /// A required `layersync_attachment *out` (a `LAYERSYNC_ATTACHMENT_INIT` struct): checked
    /// and emptied.
    /// - Parameters:
    ///   - pointer: The caller's struct.
    ///   - name: Its name in include/layersync.h, for the error message.
    /// - Returns: The pointer, known not to be NULL.
    /// - Throws: `.invalidArgument` when it is NULL or of another version.
    static func required(_ pointer: UnsafeMutablePointer<layersync_attachment>?, _ name: StaticString)
        throws(LayerSyncError) -> UnsafeMutablePointer<layersync_attachment> {
        guard let pointer, pointer.pointee.version == UInt32(LAYERSYNC_ATTACHMENT_VERSION) else {
            throw LayerSyncError(.invalidArgument, "\(name) must be a LAYERSYNC_ATTACHMENT_INIT struct")
        }
        pointer.pointee.data = nil
        pointer.pointee.size_bytes = 0
        pointer.pointee.content_type = nil
        return pointer
    }
}
