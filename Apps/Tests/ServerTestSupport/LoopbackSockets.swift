import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Blocking loopback sockets for the tests' proxies (a relay that slows or counts, one that loses
/// answers, one that resets at offsets): each connection is served on a thread of its own, never
/// on the tests' cooperative pool.
///
/// ```swift
/// let listener = try LoopbackListener()
/// listener.start { client in relay(client, to: LoopbackSockets.connect(port: target)) }
/// defer { listener.stop() }
/// ```
public final class LoopbackListener: Sendable {
    /// The port it listens on, on 127.0.0.1.
    public let port: Int
    private let fd: Int32
    private let state = Mutex<(started: Bool, stopped: Bool, closed: Bool)>((false, false, false))

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Listens on a free port; ``start(_:)`` accepts connections.
    public init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = LoopbackSockets.address(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw Failure(description: "cannot listen on a loopback port: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    /// Runs `serve` on a thread of its own for every connection (the connection's socket is
    /// `serve`'s to close), until ``stop()``.
    public func start(_ serve: @escaping @Sendable (Int32) -> Void) {
        let fd = fd
        let starts = state.withLock { state in
            defer { state.started = true }
            return !state.started && !state.stopped
        }
        guard starts else { return }
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { break }
                Thread.detachNewThread { serve(client) }
            }
            // The accepting thread closes the descriptor, after its last `accept`: closed by
            // `stop()` while this thread was between two calls, its number could be reused by a
            // socket of another test, whose connections this loop would then take (seen: a
            // listener stopped right after it started took the connection of another test's
            // silent server and closed it).
            closeOnce()
        }
    }

    /// Stops accepting (connections being served go on). Safe to call more than once.
    public func stop() {
        let fd = fd
        state.withLock { state in
            guard !state.stopped, !state.closed else { return }
            state.stopped = true
            if state.started {
                // Wakes the accepting thread (its `accept` fails), which closes the descriptor.
                shutdown(fd, Int32(SHUT_RDWR))
            } else {
                state.closed = true
                close(fd)
            }
        }
    }

    /// Closes the descriptor once (under the lock, so that `stop()` never shuts down a number
    /// already closed and perhaps reused).
    private func closeOnce() {
        let fd = fd
        state.withLock { state in
            guard !state.closed else { return }
            state.closed = true
            close(fd)
        }
    }
}

/// Helpers for blocking sockets on loopback.
public enum LoopbackSockets: Sendable {
    /// A write to a closed connection fails instead of raising SIGPIPE.
    #if canImport(Glibc)
        static let noSignal = Int32(MSG_NOSIGNAL)
    #else
        static let noSignal: Int32 = 0
    #endif

    /// 127.0.0.1 at `port`.
    static func address(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// A connection to 127.0.0.1 at `port`, or `nil` when it is refused.
    public static func connect(port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = address(port: port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                #if canImport(Glibc)
                    Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                #else
                    Darwin.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                #endif
            }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Writes all of `bytes`; `false` when the connection failed first.
    public static func writeAll(_ fd: Int32, _ bytes: some Collection<UInt8>) -> Bool {
        let bytes = Array(bytes)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, noSignal) }
            if written <= 0 { return false }
            offset += written
        }
        return true
    }

    /// Closes with a TCP reset (`SO_LINGER` 0) instead of an orderly close.
    public static func reset(_ fd: Int32) {
        var option = linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
        close(fd)
    }
}
