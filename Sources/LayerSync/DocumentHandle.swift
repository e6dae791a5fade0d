import CLayerSync
import LayerSyncCore
import LayerSyncModel
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a `layersync_document *` points to: the core's descriptor plus the C strings the
/// header says the handle owns. Created once per descriptor by its ``ClientHandle``
/// and freed with it.
final class DocumentHandle: Sendable {
    let descriptor: DocumentDescriptor
    /// `layersync_document_id`'s result, owned by this handle.
    let documentIDCString: OwnedCString
    /// `layersync_document_layer_name`'s result, owned by this handle.
    let layerNameCString: OwnedCString
    /// Registered observers, in the order they were added.
    let observers = Mutex<[ObserverHandle]>([])

    init(descriptor: DocumentDescriptor) {
        self.descriptor = descriptor
        documentIDCString = OwnedCString(descriptor.documentID)
        layerNameCString = OwnedCString(descriptor.layerName)
    }

    /// The opaque pointer handed to C; valid while the owning client lives.
    var opaque: OpaquePointer { OpaquePointer(Unmanaged.passUnretained(self).toOpaque()) }

    /// The handle behind a `layersync_document *`.
    /// - Throws: `.invalidArgument` for NULL.
    static func from(_ pointer: OpaquePointer?) throws(LayerSyncError) -> DocumentHandle {
        guard let pointer else { throw LayerSyncError(.invalidArgument, "document must not be NULL") }
        return Unmanaged<DocumentHandle>.fromOpaque(UnsafeRawPointer(pointer)).takeUnretainedValue()
    }

    /// Like ``from(_:)`` but nil for NULL, for the value-returning getters.
    static func optional(_ pointer: OpaquePointer?) -> DocumentHandle? {
        try? from(pointer)
    }
}
