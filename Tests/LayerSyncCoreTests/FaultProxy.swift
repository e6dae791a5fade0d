import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A tiny fault-injecting TCP proxy on loopback, between a client and the real test server.
///
/// Every HTTP request head that passes (a read on the client side that starts with a method)
/// is logged and given to `rule`, which decides what happens to that request:
/// - `.forward`: passes through;
/// - `.dropResponse`: the request reaches the server (which commits it), and the connection
///   is cut as soon as the server's answer starts, so the client never reads it;
/// - `.reply(status)`: the proxy answers itself with that status and an error envelope and
///   closes the connection (the server never sees the request); `.respond(status, body)`
///   likewise with a body of the test's choosing;
/// - `.hold(semaphore)`: the request waits in the proxy until the test signals;
/// - `.mutateResponse(change)`: the request reaches the server, whose whole answer is read,
///   its body passed through `change` (a garbled answer: a key removed, a number negated,
///   the body truncated...) and sent on with a matching `Content-Length` and
///   `Connection: close`.
/// The proxy speaks protocol version 1 only: it answers the change stream's requests
/// (`/sync/v2/...`) 404 itself, as a server without the stream would, so a client behind it
/// listens with per-layer long-polls (the answers these tests garble).
/// Bounded: one thread per direction per connection, everything on 127.0.0.1, stopped by
/// ``stop()`` (and deinit).
final class FaultProxy: @unchecked Sendable {
    enum Action: Sendable {
        case forward
        case dropResponse
        case reply(Int)
        /// Answers itself with this status and JSON body.
        case respond(Int, String)
        /// Forwards only once the semaphore is signalled (at most 10 s later).
        case hold(DispatchSemaphore)
        /// Forwards, then rewrites the body of the server's answer.
        case mutateResponse(@Sendable ([UInt8]) -> [UInt8])
    }

    let port: Int
    private let upstreamPort: Int
    private let listener: Int32
    private let rule: Mutex<@Sendable (String) -> Action>
    private let log = Mutex<[String]>([])
    private let connections = Mutex<[Connection]>([])
    private let stopped = Atomic<Bool>(false)

    var url: String { "http://127.0.0.1:\(port)" }

    /// Request lines seen so far (`"POST /sync/v1/... HTTP/1.1"`).
    var requestLines: [String] { log.withLock { $0 } }

    /// The `Content-Length` of a request, from the head a rule is given; `nil` without one.
    static func contentLength(_ head: String) -> Int? {
        head.lowercased().split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
            .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) }
    }

    /// Creates a proxy in front of `127.0.0.1:upstreamPort` and starts accepting.
    init(upstreamPort: Int, rule: @escaping @Sendable (String) -> Action = { _ in .forward }) throws {
        self.upstreamPort = upstreamPort
        self.rule = Mutex(rule)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(descriptor, 64) == 0 else {
            close(descriptor)
            throw TestFailure("proxy: cannot listen")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) {
            _ = $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        listener = descriptor
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    deinit { stop() }

    /// Replaces the rule.
    func setRule(_ newRule: @escaping @Sendable (String) -> Action) { rule.withLock { $0 = newRule } }

    /// Stops accepting and cuts every open connection.
    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for connection in connections.withLock({ $0 }) { connection.cut() }
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    private func acceptLoop() {
        while !stopped.load(ordering: .acquiring) {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: upstreamPort)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if connected != 0 {
                close(upstream)
                close(client)
                continue
            }
            let connection = Connection(client: client, upstream: upstream)
            connections.withLock { $0.append(connection) }
            Thread { [self] in clientToServer(connection) }.start()
            Thread { [self] in serverToClient(connection) }.start()
        }
    }

    private static let methods = ["GET ", "POST ", "PUT ", "DELETE ", "HEAD ", "PATCH "]

    private func clientToServer(_ connection: Connection) {
        defer { connection.pumpEnded() }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(connection.client, &buffer, buffer.count)
            if count <= 0 { connection.cut(); return }
            let chunk = Array(buffer[0..<count])
            let prefix = String(decoding: chunk.prefix(8), as: UTF8.self)
            if Self.methods.contains(where: { prefix.hasPrefix($0) }) {
                let text = String(decoding: chunk, as: UTF8.self)
                let head = text.components(separatedBy: "\r\n\r\n").first ?? text
                log.withLock { $0.append(head.components(separatedBy: "\r\n").first ?? head) }
                let action = head.hasPrefix("POST /sync/v2/") ? .reply(404) : rule.withLock { $0 }(head)
                switch action {
                case .forward: break
                case .dropResponse: connection.dropNextResponse.store(true, ordering: .releasing)
                case .mutateResponse(let change): connection.mutation.withLock { $0 = change }
                case .hold(let semaphore):
                    _ = semaphore.wait(timeout: .now() + 10)
                case .reply, .respond:
                    let (status, body): (Int, String)
                    if case .respond(let code, let text) = action {
                        (status, body) = (code, text)
                    } else if case .reply(let code) = action {
                        (status, body) = (code, #"{"error":{"code":"proxy_fault","message":"injected by the test proxy","details":{}}}"#)
                    } else {
                        return
                    }
                    let answer = "HTTP/1.1 \(status) Injected\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n"
                        + "LayerSync-Protocol: 1\r\nConnection: close\r\n\r\n" + body
                    Self.writeAll(connection.client, Array(answer.utf8))
                    // Drain what the client still sends (so close() does not reset the answer away).
                    shutdown(connection.client, Int32(SHUT_WR))
                    var timeout = timeval(tv_sec: 1, tv_usec: 0)
                    setsockopt(connection.client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                    while read(connection.client, &buffer, buffer.count) > 0 {}
                    connection.cut()
                    return
                }
            }
            if !Self.writeAll(connection.upstream, chunk) { connection.cut(); return }
        }
    }

    private func serverToClient(_ connection: Connection) {
        defer { connection.pumpEnded() }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(connection.upstream, &buffer, buffer.count)
            if count <= 0 { connection.cut(); return }
            if connection.dropNextResponse.load(ordering: .acquiring) {
                connection.cut()  // the server has answered, so it has committed: lose the answer
                return
            }
            if let change = connection.mutation.withLock({ $0 }) {
                connection.received += buffer[0..<count]
                guard let answer = Self.rewrite(connection.received, change) else { continue }  // not complete yet
                Self.writeAll(connection.client, answer)
                connection.cut()
                return
            }
            if !Self.writeAll(connection.client, Array(buffer[0..<count])) { connection.cut(); return }
        }
    }

    /// The response in `bytes` with its body passed through `change`, or `nil` while the head or
    /// the `Content-Length` bytes of the body are not all there yet.
    private static func rewrite(_ bytes: [UInt8], _ change: ([UInt8]) -> [UInt8]) -> [UInt8]? {
        let separator: [UInt8] = Array("\r\n\r\n".utf8)
        guard let end = (0...max(0, bytes.count - 4)).first(where: { bytes.count >= 4 && Array(bytes[$0..<$0 + 4]) == separator }) else {
            return nil
        }
        let head = String(decoding: bytes[0..<end], as: UTF8.self)
        let length = contentLength(head) ?? 0
        let body = Array(bytes[(end + 4)...])
        guard body.count >= length else { return nil }
        let kept = head.components(separatedBy: "\r\n").filter {
            let lower = $0.lowercased()
            return !lower.hasPrefix("content-length:") && !lower.hasPrefix("connection:")
        }
        let changed = change(Array(body.prefix(length)))
        let newHead = (kept + ["Content-Length: \(changed.count)", "Connection: close"]).joined(separator: "\r\n") + "\r\n\r\n"
        return Array(newHead.utf8) + changed
    }

    @discardableResult
    private static func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { return false }
            offset += written
        }
        return true
    }

    private final class Connection: @unchecked Sendable {
        let client: Int32
        let upstream: Int32
        let dropNextResponse = Atomic<Bool>(false)
        /// Set by `.mutateResponse`: the answer is collected in `received` and rewritten.
        let mutation = Mutex<(@Sendable ([UInt8]) -> [UInt8])?>(nil)
        /// The answer so far (only the server-to-client pump touches it).
        var received: [UInt8] = []
        private let ended = Atomic<Int>(0)
        private let isCut = Atomic<Bool>(false)

        init(client: Int32, upstream: Int32) {
            self.client = client
            self.upstream = upstream
        }

        /// Shuts both sockets down (wakes both pumps); idempotent.
        func cut() {
            guard !isCut.exchange(true, ordering: .acquiringAndReleasing) else { return }
            shutdown(client, Int32(SHUT_RDWR))
            shutdown(upstream, Int32(SHUT_RDWR))
        }

        /// The second pump to end closes the descriptors.
        func pumpEnded() {
            if ended.add(1, ordering: .acquiringAndReleasing).newValue == 2 {
                close(client)
                close(upstream)
            }
        }
    }
}
