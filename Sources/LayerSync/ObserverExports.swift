import CLayerSync
import LayerSyncCore
import LayerSyncModel

// "Observers" section of include/layersync.h.

@c @implementation public func layersync_document_add_observer(
    _ document: OpaquePointer?, _ observer: UnsafePointer<layersync_document_observer>?,
    _ outObserver: UnsafeMutablePointer<OpaquePointer?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        let outObserver = try OutParameter.required(outObserver, "out_observer")
        let handle = try DocumentHandle.from(document)
        try handle.descriptor.requireValid()
        guard let observer else { throw LayerSyncError(.invalidArgument, "observer must not be NULL") }
        guard observer.pointee.version == UInt32(LAYERSYNC_DOCUMENT_OBSERVER_VERSION) else {
            throw LayerSyncError(.invalidArgument, "observer.version \(observer.pointee.version) is not supported; use LAYERSYNC_DOCUMENT_OBSERVER_INIT")
        }
        let registration = ObserverHandle(table: observer.pointee, document: handle)
        handle.observers.withLock { $0.append(registration) }
        outObserver.pointee = OpaquePointer(Unmanaged.passRetained(registration).toOpaque())
    }
}

@c @implementation public func layersync_observer_remove(
    _ observer: OpaquePointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        guard let registration = ObserverHandle.from(observer) else { return }
        registration.document.observers.withLock { list in list.removeAll { $0 === registration } }
        registration.remove(onCallbackThread: registration.document.descriptor.isOnEventQueue)
        Unmanaged.passUnretained(registration).release()
    }
}
