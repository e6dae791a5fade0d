import LayerSyncModel
import LayerSyncStore

/// The client's on-disk storage: listing local documents and cache entries, removing them
/// (Instant's `localDocumentDescriptors`, `listCacheEntries`, `removeUnreferencedCacheEntries`,
/// `removeLocalStorage`).
///
/// A layer store that another process holds is never touched: listed with `"locked": true`,
/// counted as referencing everything of its document, and removing it fails with
/// `.storageLocked`.
extension SyncClient {
    /// One layer directory found on disk.
    struct StoredLayer {
        var directory: String
        var documentID: String
        var layerName: String
        var summary: LayerStore.Summary?
        var attachments: Set<String>?
    }

    /// Every layer store under the server directory, grouped by document directory.
    func storedLayers() -> [(documentDirectory: String, layers: [StoredLayer])] {
        let root = context.layout.serverDirectory
        return StorageLayout.entries(root).compactMap { documentKey in
            let documentDirectory = root + "/" + documentKey
            guard StorageLayout.isDirectory(documentDirectory) else { return nil }
            let layers = StorageLayout.entries(documentDirectory + "/layers").compactMap { layerKey -> StoredLayer? in
                let directory = documentDirectory + "/layers/" + layerKey
                guard StorageLayout.fileExists(directory + "/layer.sqlite") else { return nil }
                var layer = StoredLayer(directory: directory, documentID: documentKey, layerName: layerKey == "~" ? "" : layerKey)
                if let store = try? LayerStore.open(directory: directory) {
                    layer.summary = try? store.summary()
                    layer.attachments = try? store.referencedAttachmentIDs()
                    if let id = layer.summary?.documentID { layer.documentID = id }
                    if let name = layer.summary?.layerName { layer.layerName = name }
                }
                return layer
            }
            return (documentDirectory, layers)
        }
    }

    /// The layers stored locally, grouped by document id (Instant's `localDocumentDescriptors`):
    /// `{"<document_id>": [{"layer_name", "downloaded", "has_unsynced_changes",
    /// "pending_changes", "record_count", "locked"}]}`. A document directory without layers
    /// (a PDF only) is listed with an empty array.
    /// - Returns: The JSON text.
    public func localDocumentsJSON() -> String {
        var result = JSONObject()
        for (directory, layers) in storedLayers() {
            let documentID = layers.first?.documentID ?? String(directory.split(separator: "/").last ?? "")
            var list = result[documentID]?.arrayValue ?? []
            for layer in layers {
                var entry = JSONObject([("layer_name", .string(layer.layerName))])
                entry["downloaded"] = .bool(layer.summary?.downloaded ?? false)
                entry["has_unsynced_changes"] = .bool((layer.summary?.pendingChanges ?? 0) + (layer.summary?.pendingAttachments ?? 0) > 0)
                entry["pending_changes"] = .integer(Int64(layer.summary?.pendingChanges ?? 0))
                entry["record_count"] = .integer(Int64(layer.summary?.recordCount ?? 0))
                entry["locked"] = .bool(layer.summary == nil)
                list.append(.object(entry))
            }
            result[documentID] = .array(list)
        }
        return JSONValue.object(result).jsonText
    }

    /// One file or store of the disk cache.
    struct CacheEntry {
        var json: JSONObject
        var path: String
        var referenced: Bool
        var sizeBytes: Int64
    }

    func cacheEntries() -> [CacheEntry] {
        var entries: [CacheEntry] = []
        let downloading = Set(documents.filter { $0.isDownloading }.map { context.layout.pdfPath($0.documentID) + ".part" })
        for (directory, layers) in storedLayers() {
            let documentID = layers.first?.documentID ?? String(directory.split(separator: "/").last ?? "")
            func entry(_ kind: String, _ path: String, referenced: Bool, extra: [(String, JSONValue)] = []) {
                let size = StorageLayout.treeSize(path)
                var json = JSONObject([("document_id", .string(documentID)), ("kind", .string(kind))])
                for (key, value) in extra { json[key] = value }
                json["path"] = .string(path)
                json["size_bytes"] = .integer(size)
                json["referenced"] = .bool(referenced)
                entries.append(CacheEntry(json: json, path: path, referenced: referenced, sizeBytes: size))
            }
            let pdf = directory + "/document.pdf"
            if StorageLayout.fileExists(pdf) { entry("pdf", pdf, referenced: !layers.isEmpty) }
            if StorageLayout.fileExists(pdf + ".part") {
                entry("partial_download", pdf + ".part", referenced: downloading.contains(pdf + ".part"))
            }
            for layer in layers {
                entry("layer", layer.directory, referenced: true, extra: [("layer_name", .string(layer.layerName))])
            }
            let everything = layers.contains { $0.attachments == nil }  // a locked store may reference any
            let referencedAttachments = layers.reduce(into: Set<String>()) { $0.formUnion($1.attachments ?? []) }
            for name in StorageLayout.entries(directory + "/attachments") {
                let id = name.hasSuffix(".part") ? String(name.dropLast(5)) : name
                entry("attachment", directory + "/attachments/" + name,
                      referenced: everything || (!name.hasSuffix(".part") && referencedAttachments.contains(id)),
                      extra: [("attachment_id", .string(id))])
            }
        }
        return entries
    }

    /// The disk cache (Instant's `listCacheEntries`): `[{"document_id", "kind", "layer_name"?,
    /// "attachment_id"?, "path", "size_bytes", "referenced"}]`, `kind` one of `pdf`, `layer`
    /// (a layer store: records and pending changes), `attachment`, `partial_download`.
    /// An entry is unreferenced when nothing local needs it: an attachment no record of the
    /// document refers to, a PDF without any layer store, a partial download not running.
    /// - Returns: The JSON text.
    public func cacheEntriesJSON() -> String {
        JSONValue.array(cacheEntries().map { .object($0.json) }).jsonText
    }

    /// Removes every unreferenced cache entry (Instant's `removeUnreferencedCacheEntries`).
    /// - Returns: The bytes freed.
    /// - Throws: `.couldNotRemoveDiskCacheEntries` when a file cannot be removed.
    @discardableResult
    public func removeUnreferencedCacheEntries() throws(LayerSyncError) -> Int64 {
        var freed: Int64 = 0
        for entry in cacheEntries() where !entry.referenced {
            try StorageLayout.removeTree(entry.path)
            freed += entry.sizeBytes
        }
        return freed
    }

    /// Removes the local storage of every document (Instant's `removeLocalStorage`): each
    /// descriptor handed out becomes `.invalid` (see ``DocumentDescriptor/removeLocalStorage()``).
    /// - Throws: `.storageLocked` when another process holds a layer (nothing of that document
    ///   is removed; the others are), `.couldNotRemoveDiskCacheEntries`.
    public func removeLocalStorage() throws(LayerSyncError) {
        var firstError: LayerSyncError?
        for (directory, layers) in storedLayers() {
            do throws(LayerSyncError) {
                try removeDocumentStorage(directory: directory, documentID: layers.first?.documentID)
            } catch {
                if firstError == nil { firstError = error }
            }
        }
        if let firstError { throw firstError }
    }

    /// Removes the local storage of one document, all its layers
    /// (Instant's `removeLocalStorage(forDocumentIdentifier:)`).
    /// A document is managed by this client once a descriptor was handed out for it (even one
    /// whose storage was removed since) or while anything of it is stored locally.
    /// - Parameter documentID: The document id.
    /// - Throws: `.unmanagedDocument` when this client neither stores anything of the document
    ///   nor handed out a descriptor for it (Instant's `unmanagedDocument`: likely a wrong id),
    ///   `.storageLocked`, `.couldNotRemoveDiskCacheEntries`.
    public func removeLocalStorage(documentID: String) throws(LayerSyncError) {
        let directory = context.layout.documentDirectory(documentID)
        if !StorageLayout.isDirectory(directory), !documents.contains(where: { $0.documentID == documentID }) {
            throw LayerSyncError(.unmanagedDocument, "this client has no local storage and no descriptor for document '\(documentID)'",
                                 documentID: documentID)
        }
        try removeDocumentStorage(directory: directory, documentID: documentID)
    }

    private func removeDocumentStorage(directory: String, documentID: String?) throws(LayerSyncError) {
        // Take every layer's lock first: if another process holds one, remove nothing.
        var held: [LayerStore] = []
        defer { withExtendedLifetime(held) {} }
        for layerKey in StorageLayout.entries(directory + "/layers") {
            let layerDirectory = directory + "/layers/" + layerKey
            guard StorageLayout.fileExists(layerDirectory + "/layer.sqlite") else { continue }
            do throws(LayerSyncError) {
                held.append(try LayerStore.open(directory: layerDirectory))
            } catch {
                throw LayerSyncError(error.code, error.message, documentID: documentID)
            }
        }
        for descriptor in documents where held.contains(where: { $0 === descriptor.store }) {
            descriptor.invalidate()
        }
        for store in held { store.close() }
        try StorageLayout.removeTree(directory)
    }
}
