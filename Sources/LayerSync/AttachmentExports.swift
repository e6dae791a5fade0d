import CLayerSync
import LayerSyncCore
import LayerSyncModel

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// "Attachments" section of include/layersync.h.

@c @implementation public func layersync_document_add_attachment(
    _ document: OpaquePointer?, _ data: UnsafeRawPointer?, _ sizeBytes: Int, _ contentType: UnsafePointer<CChar>?,
    _ outAttachmentID: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outAttachmentID = try OutParameter.required(outAttachmentID, "out_attachment_id")
        guard data != nil || sizeBytes == 0 else { throw LayerSyncError(.invalidArgument, "data must not be NULL") }
        let bytes = data.map { Array(UnsafeRawBufferPointer(start: $0, count: sizeBytes)) } ?? []
        let id = try descriptor.addAttachment(bytes: bytes, contentType: try CString.read(contentType, "content_type"))
        CString.store(id, in: outAttachmentID)
    }
}

@c @implementation public func layersync_document_attachment_data(
    _ document: OpaquePointer?, _ attachmentID: UnsafePointer<CChar>?,
    _ outAttachment: UnsafeMutablePointer<layersync_attachment>?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    withDescriptor(document, error) { descriptor throws(LayerSyncError) in
        let outAttachment = try OutParameter.required(outAttachment, "out_attachment")
        let (bytes, contentType) = try descriptor.attachmentData(id: try CString.read(attachmentID, "attachment_id"))
        if !bytes.isEmpty {
            guard let buffer = malloc(bytes.count) else { fatalError("layersync: out of memory") }
            bytes.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress!, byteCount: bytes.count) }
            outAttachment.pointee.data = buffer
        }
        outAttachment.pointee.size_bytes = bytes.count
        outAttachment.pointee.content_type = CString.copy(contentType)
    }
}

@c @implementation public func layersync_document_download_attachment(
    _ document: OpaquePointer?, _ attachmentID: UnsafePointer<CChar>?, _ callback: layersync_document_result_cb?,
    _ context: UnsafeMutableRawPointer?, _ error: UnsafeMutablePointer<layersync_error>?
) -> Int32 {
    startOperation(document, callback, context, error) { descriptor, completion throws(LayerSyncError) in
        try descriptor.downloadAttachment(id: try CString.read(attachmentID, "attachment_id"), completion: completion)
    }
}
