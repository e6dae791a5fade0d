import LayerSyncModel

#if canImport(Glibc)
import Glibc
#endif

/// Paths of the client's on-disk layout (docs/architecture.md §8):
/// `<storage>/<server-key>/<document-key>/document.pdf` and
/// `.../layers/<layer-key>/{layer.sqlite,lock}`. Directories are created 0700.
package struct StorageLayout: Sendable {
    /// The client's storage directory.
    package var root: String
    /// `<root>/<server-key>`.
    package var serverDirectory: String

    /// Creates the layout for one server.
    /// - Parameters:
    ///   - root: The storage directory.
    ///   - server: The server's base URL.
    package init(root: String, server: ServerURL) {
        var root = root
        while root.count > 1, root.hasSuffix("/") { root.removeLast() }
        self.root = root
        let readable = "\(server.scheme)-\(server.host)\(server.port.map { "-\($0)" } ?? "")"
        self.serverDirectory = root + "/" + Self.key(readable, hashing: server.base)
    }

    /// `<server>/<document-key>`.
    package func documentDirectory(_ documentID: String) -> String { serverDirectory + "/" + Self.key(documentID) }
    /// `<server>/<document-key>/document.pdf`.
    package func pdfPath(_ documentID: String) -> String { documentDirectory(documentID) + "/document.pdf" }
    /// `<server>/<document-key>/layers/<layer-key>`.
    package func layerDirectory(_ documentID: String, layer: String) -> String {
        documentDirectory(documentID) + "/layers/" + Self.key(layer.isEmpty ? "~" : layer)
    }

    /// A filesystem-safe name for `text`: the text itself if it is 1–64 characters of
    /// `[A-Za-z0-9._~-]` (and not `.`/`..`), else a sanitised prefix plus a 64-bit FNV-1a hash.
    /// - Parameters:
    ///   - text: The name to encode.
    ///   - hashing: What to hash if not the text itself (always hashed when given).
    /// - Returns: The directory name.
    static func key(_ text: String, hashing: String? = nil) -> String {
        let safe = text.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"), UInt8(ascii: "-"): true
            default: false
            }
        }
        if hashing == nil, safe, (1...64).contains(text.utf8.count), text != ".", text != ".." { return text }
        let prefix = String(String.UnicodeScalarView(text.unicodeScalars.prefix(32).map {
            ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains(Character($0)))) ? $0 : "_"
        }))
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in (hashing ?? text).utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        let hex = String(hash, radix: 16)
        return prefix + "-" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Creates a directory and its missing parents with mode 0700.
    /// - Parameter path: The directory.
    /// - Throws: `.couldNotWriteToDisk` if a component cannot be created or is not a directory.
    package static func createDirectory(_ path: String) throws(LayerSyncError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            if mkdir(current, 0o700) != 0 {
                let error = errno
                var info = stat()
                if error == EEXIST, stat(current, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR { continue }
                throw LayerSyncError(.couldNotWriteToDisk, "cannot create directory \(current): \(String(cString: strerror(error)))")
            }
        }
    }

    /// Whether a regular file exists at `path`.
    package static func fileExists(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }
}

extension StorageLayout {
    /// Names in a directory (without `.` and `..`); empty if it cannot be read.
    package static func entries(_ path: String) -> [String] {
        guard let directory = opendir(path) else { return [] }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != ".", name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// Whether `path` is a directory.
    package static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Size of a regular file in bytes, 0 if absent.
    static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG ? Int64(info.st_size) : 0
    }

    /// Bytes of every regular file below `path` (or of `path` itself).
    package static func treeSize(_ path: String) -> Int64 {
        guard isDirectory(path) else { return fileSize(path) }
        return entries(path).reduce(0) { $0 + treeSize(path + "/" + $1) }
    }

    /// Removes a file or a directory tree (symbolic links are removed, never followed).
    /// - Parameter path: What to remove; absent is fine.
    /// - Throws: `.couldNotRemoveDiskCacheEntries` naming the first path that could not be removed.
    package static func removeTree(_ path: String) throws(LayerSyncError) {
        if isDirectory(path) {
            for name in entries(path) { try removeTree(path + "/" + name) }
            guard rmdir(path) == 0 || errno == ENOENT else {
                throw LayerSyncError(.couldNotRemoveDiskCacheEntries, "cannot remove \(path): \(String(cString: strerror(errno)))")
            }
        } else if unlink(path) != 0, errno != ENOENT {
            throw LayerSyncError(.couldNotRemoveDiskCacheEntries, "cannot remove \(path): \(String(cString: strerror(errno)))")
        }
    }
}
