import CLayerSync
import LayerSyncCore
import LayerSyncModel

// Comments, search and the one-shot server operations of the "Records" section.

@c @implementation public func layersync_document_create_comment(
    _ document: OpaquePointer?, _ rootID: UnsafePointer<CChar>?, _ commentJSON: UnsafePointer<CChar>?,
    _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outJSON = OutParameter.optional(outJSON)
        let stored = try descriptor.createComment(rootID: try CString.read(rootID, "root_id"),
                                                  json: try CString.read(commentJSON, "comment_json"))
        CString.store(stored, in: outJSON)
    }
}

@c @implementation public func layersync_document_list_comments(
    _ document: OpaquePointer?, _ rootID: UnsafePointer<CChar>?,
    _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outJSON = try OutParameter.required(outJSON, "out_json")
        CString.store(try descriptor.listComments(rootID: try CString.read(rootID, "root_id")), in: outJSON)
    }
}

@c @implementation public func layersync_document_search_annotations(
    _ document: OpaquePointer?, _ query: UnsafePointer<CChar>?, _ limit: Int32,
    _ outJSON: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outJSON = try OutParameter.required(outJSON, "out_json")
        let text = try CString.read(query, "query")
        CString.store(try descriptor.searchAnnotations(query: text, limit: Int64(limit)), in: outJSON)
    }
}

/// Starts a one-shot operation whose completion calls `callback` on the callback thread.
func startOperation(
    _ document: OpaquePointer?, _ callback: layersync_document_result_cb?, _ context: UnsafeMutableRawPointer?,
    _ error: UnsafeMutablePointer<layersync_error>?,
    _ start: (DocumentDescriptor, @escaping DocumentDescriptor.OperationCompletion) throws(LayerSyncError) -> Void
) -> Int32 {
    ErrorBridge.run(error) { () throws(LayerSyncError) in
        let handle = try DocumentHandle.from(document)
        guard let callback else { throw LayerSyncError(.invalidArgument, "callback must not be NULL") }
        let target = ResultCallback(callback: callback, context: context)
        let pointer = UncheckedDocumentPointer(value: handle.opaque)
        try start(handle.descriptor) { result in
            withExtendedLifetime(handle) {
                switch result {
                case .success(let json):
                    json.withCString { target.callback(target.context, pointer.value, $0, nil) }
                case .failure(let failure):
                    ErrorBridge.withTemporary(failure) { target.callback(target.context, pointer.value, nil, $0) }
                }
            }
        }
    }
}

@c @implementation public func layersync_document_annotation_history(
    _ document: OpaquePointer?, _ annotationID: UnsafePointer<CChar>?, _ callback: layersync_document_result_cb?,
    _ context: UnsafeMutableRawPointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    startOperation(document, callback, context, error) { descriptor, completion throws(LayerSyncError) in
        try descriptor.annotationHistory(id: try CString.read(annotationID, "annotation_id"), completion: completion)
    }
}

@c @implementation public func layersync_document_rollback_annotation(
    _ document: OpaquePointer?, _ annotationID: UnsafePointer<CChar>?, _ revision: Int64,
    _ callback: layersync_document_result_cb?, _ context: UnsafeMutableRawPointer?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    startOperation(document, callback, context, error) { descriptor, completion throws(LayerSyncError) in
        try descriptor.rollbackAnnotation(id: try CString.read(annotationID, "annotation_id"), revision: revision,
                                          completion: completion)
    }
}

@c @implementation public func layersync_document_list_deleted_annotations(
    _ document: OpaquePointer?, _ callback: layersync_document_result_cb?, _ context: UnsafeMutableRawPointer?,
    _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    startOperation(document, callback, context, error) { descriptor, completion throws(LayerSyncError) in
        try descriptor.listDeletedAnnotations(completion: completion)
    }
}

@c @implementation public func layersync_document_restore_annotation(
    _ document: OpaquePointer?, _ annotationID: UnsafePointer<CChar>?, _ callback: layersync_document_result_cb?,
    _ context: UnsafeMutableRawPointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    startOperation(document, callback, context, error) { descriptor, completion throws(LayerSyncError) in
        try descriptor.restoreAnnotation(id: try CString.read(annotationID, "annotation_id"), completion: completion)
    }
}
