import LayerSyncModel
import LayerSyncStore
import LayerSyncTransport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Downloading the PDF and the layer snapshot.
extension DocumentDescriptor {
    /// Downloads the PDF (streamed to `document.pdf`, reported through `downloadProgress`)
    /// and the layer snapshot (paged) into the local store (Instant's `download(using:)`).
    /// Ends with `didFinishDownload` or `didFailDownload`.
    /// - Throws: `.alreadyDownloaded`; `.invalidState` while a download runs, after
    ///   shutdown, or after storage removal.
    public func download() throws(LayerSyncError) {
        guard !context.isShutDown else { throw LayerSyncError(.invalidState, "the client is shut down") }
        if store.needsDatabaseReset || isResettingDatabase {
            throw LayerSyncError(.contentMigrationNeeded, "the local layer store needs a reset; call attemptContentMigration()", documentID: documentID)
        }
        if isDownloaded { throw LayerSyncError(.alreadyDownloaded, "the document is already downloaded", documentID: documentID) }
        let cancellation = TransferCancellation()
        let started: LayerSyncError? = mutableState.withLock { state in
            if state.invalid { return LayerSyncError(.invalidState, "the document's storage was removed", documentID: documentID) }
            if state.download != nil { return LayerSyncError(.invalidState, "a download is already running", documentID: documentID) }
            state.download = cancellation
            return nil
        }
        if let started { throw started }
        workQueue.async { [self] in runDownload(cancellation) }
    }

    /// Cancels a running download; it then fails with `.cancelled`.
    public func cancelDownload() {
        mutableState.withLock { $0.download?.cancel() }
    }

    private func runDownload(_ cancellation: TransferCancellation) {
        let token = jwt
        do throws(LayerSyncError) {
            try downloadPDF(token: token, cancellation: cancellation)
            _ = try downloadSnapshot(token: token, cancellation: cancellation, reportChanges: false)
            mutableState.withLock { $0.download = nil }
            publishState()
            emit(.didFinishDownload(self))
        } catch {
            mutableState.withLock { $0.download = nil }
            emit(.didFailDownload(self, error.with(documentID: documentID)))
            if error.code == .accessDenied, error.httpStatus != nil { noteAuthenticationFailure(error, token: token) }
        }
    }

    /// Streams the PDF into `document.pdf.part`, syncs it, and renames it into place.
    private func downloadPDF(token: String, cancellation: TransferCancellation) throws(LayerSyncError) {
        try StorageLayout.createDirectory(context.layout.documentDirectory(documentID))
        let partial = pdfFilePath + ".part"
        let descriptor = open(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw LayerSyncError(.couldNotWriteToDisk, "cannot create \(partial): \(String(cString: strerror(errno)))", documentID: documentID)
        }
        var closed = false
        defer {
            if !closed { close(descriptor) }
        }
        let throttle = ProgressThrottle()
        try context.server.downloadPDF(
            documentID: documentID, jwt: token, fileDescriptor: descriptor,
            progress: { [self] done, total in
                if throttle.shouldReport(done: done, total: total) { emit(.downloadProgress(self, bytesDone: done, bytesTotal: total)) }
            },
            session: workSession, cancellation: cancellation)
        let size = lseek(descriptor, 0, SEEK_CUR)
        if throttle.lastReported != Int64(size) { emit(.downloadProgress(self, bytesDone: Int64(size), bytesTotal: Int64(size))) }
        guard fsync(descriptor) == 0 else {
            unlink(partial)
            throw LayerSyncError(.couldNotWriteToDisk, "cannot sync \(partial)", documentID: documentID)
        }
        close(descriptor)
        closed = true
        guard rename(partial, pdfFilePath) == 0 else {
            unlink(partial)
            throw LayerSyncError(.couldNotWriteToDisk, "cannot rename \(partial)", documentID: documentID)
        }
    }
}

/// Limits `downloadProgress` events to about one per percent (or 64 KiB when the total is unknown).
final class ProgressThrottle: Sendable {
    private let reported = Mutex<Int64>(-1)

    /// The last reported byte count (-1 before the first).
    var lastReported: Int64 { reported.withLock { $0 } }

    /// Whether progress at `done` bytes should be reported; records it if so.
    /// - Parameters:
    ///   - done: Bytes received.
    ///   - total: Bytes expected, or -1.
    /// - Returns: `true` to report.
    func shouldReport(done: Int64, total: Int64) -> Bool {
        reported.withLock { last in
            let step = total > 0 ? max(total / 100, 1) : 65_536
            guard last < 0 || done - last >= step || (total > 0 && done == total && last != done) else { return false }
            last = done
            return true
        }
    }
}
