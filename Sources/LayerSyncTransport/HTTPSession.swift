import CCurl
import LayerSyncModel
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP request for ``HTTPSession``.
struct HTTPRequest: Sendable {
    /// `GET`, `POST`, `PUT`, ...
    var method: String = "GET"
    /// The absolute URL.
    var url: String
    /// Header lines, `"Name: value"`.
    var headers: [String] = []
    /// The request body, if any.
    var body: [UInt8]?
    /// Seconds for the whole transfer (0 = no limit).
    var timeoutSeconds: Double = 30
    /// If set, the response body of a 2xx answer is written to this file descriptor instead of memory.
    var bodyFileDescriptor: Int32?
    /// Whether to compute the SHA-256 of the 2xx body written to `bodyFileDescriptor`
    /// (``HTTPResponse/fileSHA256``).
    var hashFileBody = false
    /// Called with (bytes received, bytes expected or -1) as the body arrives.
    var progress: (@Sendable (Int64, Int64) -> Void)?
    /// A streamed answer (the change stream): the body of a 2xx answer goes to this function
    /// as it arrives, on the transfer's thread, instead of memory; returning `false` ends the
    /// transfer (`.requestFailed`). Other answers are kept in memory as usual.
    var onBodyChunk: (@Sendable (UnsafeRawBufferPointer) -> Bool)?
    /// Called about once a second while the transfer runs, with whether the request has been
    /// sent (connected, and the request is on its way: libcurl's pretransfer time is set);
    /// returning `true` ends the transfer (`.requestFailed`): the stream's deadline for its
    /// first event.
    var watchdog: (@Sendable (_ requestSent: Bool) -> Bool)?
    /// Seconds in which fewer than one byte arrived end the transfer (`.requestFailed`: a dead
    /// peer), `nil` for no such limit (libcurl `CURLOPT_LOW_SPEED_LIMIT` = 1 / `LOW_SPEED_TIME`).
    var stallSeconds: Int?
}

/// An HTTP answer.
struct HTTPResponse: Sendable {
    /// The status code.
    var status: Int
    /// Headers, names lowercased (the last value wins).
    var headers: [String: String]
    /// The body (empty if it was streamed to a file).
    var body: [UInt8]
    /// The SHA-256 hex of the bytes streamed to the file, when ``HTTPRequest/hashFileBody`` asked for it.
    var fileSHA256: String? = nil
}

/// A libcurl-backed HTTP client for one lane of work (one request at a time).
///
/// It keeps one easy handle, so keep-alive connections are reused across requests, and
/// drives it through a multi handle with `curl_multi_poll`, so a ``TransferCancellation``
/// can abort a running transfer at once with `curl_multi_wakeup`.
package final class HTTPSession: Sendable {
    private struct Handles {
        var easy: UncheckedSendable<UnsafeMutableRawPointer>
        var multi: UncheckedSendable<UnsafeMutableRawPointer>
    }

    /// The handles; the lock is held for a whole transfer (one lane = one request at a time).
    private let handles: Mutex<Handles>
    private let connectTimeoutSeconds: Double

    static let globalInit: Void = { _ = ls_curl_global_init_default() }()

    /// Creates a session.
    /// - Parameter connectTimeoutSeconds: Seconds allowed to establish a connection.
    package init(connectTimeoutSeconds: Double) {
        Self.globalInit
        self.connectTimeoutSeconds = connectTimeoutSeconds
        handles = Mutex(Handles(easy: UncheckedSendable(curl_easy_init()!), multi: UncheckedSendable(curl_multi_init()!)))
    }

    deinit {
        handles.withLock { handles in
            curl_easy_cleanup(handles.easy.value)
            curl_multi_cleanup(handles.multi.value)
        }
    }

    /// Closes the connections the session keeps alive (after the request in progress, if any):
    /// the next request connects anew. For a path found dead on another connection to the
    /// same server (a stalled middlebox holds the idle ones too, and a request on one of them
    /// would wait out its whole timeout).
    package func closeIdleConnections() {
        handles.withLock { handles in
            curl_multi_cleanup(handles.multi.value)
            handles.multi = UncheckedSendable(curl_multi_init()!)
        }
    }

    /// Performs a request, blocking the calling thread until it ends.
    /// - Parameters:
    ///   - request: The request.
    ///   - cancellation: Aborts the transfer when cancelled.
    /// - Returns: The answer (any status).
    /// - Throws: `.cancelled`; `.requestFailed` when no answer arrived (DNS, connect, timeout, reset);
    ///   `.couldNotWriteToDisk` when the body file could not be written.
    func perform(_ request: HTTPRequest, cancellation: TransferCancellation) throws(LayerSyncError) -> HTTPResponse {
        let result: Result<HTTPResponse, LayerSyncError> = handles.withLock { handles in
            Result { () throws(LayerSyncError) in
                try Self.perform(request, easy: handles.easy.value, multi: handles.multi.value,
                                 connectTimeout: connectTimeoutSeconds, cancellation: cancellation)
            }
        }
        return try result.get()
    }

    private static func perform(_ request: HTTPRequest, easy: UnsafeMutableRawPointer, multi: UnsafeMutableRawPointer, connectTimeout: Double,
                                cancellation: TransferCancellation) throws(LayerSyncError) -> HTTPResponse {
        let transfer = HTTPTransfer(request, easy: easy, connectTimeout: connectTimeout, cancellation: cancellation)
        return try withExtendedLifetime(transfer) { () throws(LayerSyncError) -> HTTPResponse in
            guard cancellation.attach(multi) else { throw LayerSyncError(.cancelled, "cancelled") }
            curl_multi_add_handle(multi, easy)
            defer {
                curl_multi_remove_handle(multi, easy)
                cancellation.detach()
            }
            var code = CURLE_OK
            while true {
                var running: Int32 = 0
                curl_multi_perform(multi, &running)
                if running == 0 {
                    var done: UnsafeMutableRawPointer?
                    _ = ls_curl_multi_done(multi, &done, &code)
                    break
                }
                if cancellation.isCancelled { throw LayerSyncError(.cancelled, "cancelled") }
                curl_multi_poll(multi, nil, 0, 1000, nil)
            }
            return try transfer.finish(code)
        }
    }
}

/// One transfer on an easy handle: the handle configured for the request, the state its C
/// callbacks share (used on the transfer's thread only), and the answer it makes. Used by
/// ``HTTPSession`` (one transfer at a time) and ``HTTPTransferGroup`` (several on one thread).
final class HTTPTransfer {
    /// State shared with the C callbacks (same thread only).
    private final class Context {
        var status = 0
        var headers: [String: String] = [:]
        var body: [UInt8] = []
        var fileDescriptor: Int32?
        var fileHasher: SHA256.Hasher?
        var writeFailed = false
        var progress: (@Sendable (Int64, Int64) -> Void)?
        var onBodyChunk: (@Sendable (UnsafeRawBufferPointer) -> Bool)?
        var watchdog: (@Sendable (Bool) -> Bool)?
        var easy: UnsafeMutableRawPointer?
        var lastReported: curl_off_t = -1
        let cancellation: TransferCancellation
        init(cancellation: TransferCancellation) { self.cancellation = cancellation }
    }

    let request: HTTPRequest
    let easy: UnsafeMutableRawPointer
    let cancellation: TransferCancellation
    private let context: Context
    private var headerList: UnsafeMutablePointer<curl_slist>?

    /// Resets `easy` and configures it for `request` (the handle must outlive the transfer).
    init(_ request: HTTPRequest, easy: UnsafeMutableRawPointer, connectTimeout: Double, cancellation: TransferCancellation) {
        self.request = request
        self.easy = easy
        self.cancellation = cancellation
        curl_easy_reset(easy)
        let handle = easy
        let context = Context(cancellation: cancellation)
        self.context = context
        context.fileDescriptor = request.bodyFileDescriptor
        if request.hashFileBody { context.fileHasher = SHA256.Hasher() }
        context.progress = request.progress
        context.onBodyChunk = request.onBodyChunk
        context.watchdog = request.watchdog
        context.easy = easy
        let contextPointer = Unmanaged.passUnretained(context).toOpaque()
        for line in request.headers + ["Expect:"] { headerList = curl_slist_append(headerList, line) }

        _ = ls_curl_setopt_str(handle, CURLOPT_URL, request.url)
        _ = ls_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        _ = ls_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Int(connectTimeout * 1000))
        _ = ls_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, Int(request.timeoutSeconds * 1000))
        _ = ls_curl_setopt_slist(handle, CURLOPT_HTTPHEADER, headerList)
        _ = ls_curl_setopt_str(handle, CURLOPT_ACCEPT_ENCODING, "")
        _ = ls_curl_setopt_long(handle, CURLOPT_TCP_KEEPALIVE, 1)
        if let stallSeconds = request.stallSeconds {
            // libcurl judges the speed averaged over its last 5 s (progress.c, CURR_TIME), so
            // a transfer that goes silent drops below 1 byte/s about 5 s after its last byte;
            // its count starts then. Asking for 5 s less ends it `stallSeconds` after that byte.
            _ = ls_curl_setopt_long(handle, CURLOPT_LOW_SPEED_LIMIT, 1)
            _ = ls_curl_setopt_long(handle, CURLOPT_LOW_SPEED_TIME, max(1, stallSeconds - 5))
        }
        if let body = request.body {
            _ = ls_curl_setopt_long(handle, CURLOPT_POST, 1)
            _ = ls_curl_setopt_off(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            body.withUnsafeBufferPointer { buffer in
                // COPYPOSTFIELDS copies the bytes (size set above), so the buffer need not outlive this call.
                _ = ls_curl_setopt_ptr(handle, CURLOPT_COPYPOSTFIELDS,
                                       UnsafeMutableRawPointer(mutating: buffer.baseAddress ?? UnsafePointer(bitPattern: 1)!))
            }
        }
        if request.method != "GET" && !(request.method == "POST" && request.body != nil) {
            _ = ls_curl_setopt_str(handle, CURLOPT_CUSTOMREQUEST, request.method)
        }
        _ = ls_curl_setopt_data_cb(handle, CURLOPT_HEADERFUNCTION) { pointer, size, count, user in
            let context = Unmanaged<Context>.fromOpaque(user!).takeUnretainedValue()
            let length = size * count
            guard let pointer else { return length }
            let line = String(decoding: UnsafeRawBufferPointer(start: pointer, count: length), as: UTF8.self)
            if line.hasPrefix("HTTP/") {
                // A new status line (after 1xx or a redirect): start over.
                context.headers = [:]
                let fields = line.split(separator: " ")
                context.status = fields.count > 1 ? Int(fields[1]) ?? 0 : 0
            } else if let colon = line.firstIndex(of: ":") {
                let name = line[..<colon].lowercased()
                let value = line[line.index(after: colon)...].trimmingCharacters(in: " \t\r\n")
                context.headers[name] = value
            }
            return length
        }
        _ = ls_curl_setopt_ptr(handle, CURLOPT_HEADERDATA, contextPointer)
        _ = ls_curl_setopt_data_cb(handle, CURLOPT_WRITEFUNCTION) { pointer, size, count, user in
            let context = Unmanaged<Context>.fromOpaque(user!).takeUnretainedValue()
            let length = size * count
            guard let pointer, length > 0 else { return length }
            if let descriptor = context.fileDescriptor, context.status / 100 == 2 {
                var offset = 0
                while offset < length {
                    let written = write(descriptor, pointer + offset, length - offset)
                    if written < 0 {
                        if errno == EINTR { continue }
                        context.writeFailed = true
                        return 0
                    }
                    offset += written
                }
                context.fileHasher?.update(UnsafeRawBufferPointer(start: pointer, count: length))
            } else if let onBodyChunk = context.onBodyChunk, context.status / 100 == 2 {
                return onBodyChunk(UnsafeRawBufferPointer(start: pointer, count: length)) ? length : 0
            } else {
                context.body.append(contentsOf: UnsafeRawBufferPointer(start: pointer, count: length))
            }
            return length
        }
        _ = ls_curl_setopt_ptr(handle, CURLOPT_WRITEDATA, contextPointer)
        _ = ls_curl_setopt_long(handle, CURLOPT_NOPROGRESS, 0)
        _ = ls_curl_setopt_xferinfo_cb(handle) { user, downloadTotal, downloadNow, _, _ in
            let context = Unmanaged<Context>.fromOpaque(user!).takeUnretainedValue()
            if context.cancellation.isCancelled { return 1 }
            if let watchdog = context.watchdog {
                var pretransfer: curl_off_t = 0
                _ = ls_curl_getinfo_off(context.easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer)
                if watchdog(pretransfer > 0) { return 1 }
            }
            if let progress = context.progress, downloadNow != context.lastReported, downloadNow > 0 {
                context.lastReported = downloadNow
                progress(Int64(downloadNow), downloadTotal > 0 ? Int64(downloadTotal) : -1)
            }
            return 0
        }
        _ = ls_curl_setopt_ptr(handle, CURLOPT_XFERINFODATA, contextPointer)
    }

    deinit { curl_slist_free_all(headerList) }

    /// The answer of the transfer that ended with libcurl's `code` (removed from its multi handle).
    /// - Throws: `.cancelled`; `.couldNotWriteToDisk`; `.requestFailed` when no answer arrived.
    func finish(_ code: CURLcode) throws(LayerSyncError) -> HTTPResponse {
        if cancellation.isCancelled { throw LayerSyncError(.cancelled, "cancelled") }
        if context.writeFailed {
            throw LayerSyncError(.couldNotWriteToDisk, "cannot write the downloaded file: \(String(cString: strerror(errno)))")
        }
        guard code == CURLE_OK else {
            throw LayerSyncError(.requestFailed, "\(request.method) \(request.url): \(String(cString: curl_easy_strerror(code)))")
        }
        var status = 0
        _ = ls_curl_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        return HTTPResponse(status: status, headers: context.headers, body: context.body, fileSHA256: context.fileHasher?.finalize())
    }
}

private extension Substring {
    func trimmingCharacters(in set: String) -> String {
        var slice = self[...]
        while let first = slice.first, set.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, set.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }
}
