import CLayerSync
import LayerSyncCore
import LayerSyncModel

// "Records" section of include/layersync.h: Instant JSON strings in and out.

@c @implementation public func layersync_document_create_annotation(
    _ document: OpaquePointer?, _ annotationJSON: UnsafePointer<CChar>?,
    _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outJSON = OutParameter.optional(outJSON)
        let stored = try descriptor.createAnnotation(json: try CString.read(annotationJSON, "annotation_json"))
        CString.store(stored, in: outJSON)
    }
}

@c @implementation public func layersync_document_update_annotation(
    _ document: OpaquePointer?, _ annotationJSON: UnsafePointer<CChar>?,
    _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outJSON = OutParameter.optional(outJSON)
        let stored = try descriptor.updateAnnotation(json: try CString.read(annotationJSON, "annotation_json"))
        CString.store(stored, in: outJSON)
    }
}

@c @implementation public func layersync_document_delete_annotation(
    _ document: OpaquePointer?, _ annotationID: UnsafePointer<CChar>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        try descriptor.deleteAnnotation(id: try CString.read(annotationID, "annotation_id"))
    }
}

@c @implementation public func layersync_document_get_annotation(
    _ document: OpaquePointer?, _ annotationID: UnsafePointer<CChar>?,
    _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outJSON = try OutParameter.required(outJSON, "out_json")
        CString.store(try descriptor.annotation(id: try CString.read(annotationID, "annotation_id")), in: outJSON)
    }
}

@c @implementation public func layersync_document_list_annotations(
    _ document: OpaquePointer?, _ filterJSON: UnsafePointer<CChar>?,
    _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outJSON = try OutParameter.required(outJSON, "out_json")
        let filter = try CString.readOptional(filterJSON, "filter_json")
        CString.store(try descriptor.listAnnotations(filterJSON: filter), in: outJSON)
    }
}
