import NIOCore
import PostgresNIO

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a connection to PostgreSQL failed, in words: "the connection was refused", not SwiftNIO's
/// `SingleConnectionFailure(target: [IPv4]127.0.0.1/127.0.0.1:5999, error: connection reset (error
/// set): Connection refused) (errno: 111))`.
enum ConnectionFailure {
    /// The reason, or `nil` when `error` is not a connection failure this knows.
    static func reason(_ error: any Error) -> String? {
        switch error {
        case let error as NIOConnectionError:
            if let failure = error.connectionErrors.first { return reason(failure.error) ?? "\(failure.error)" }
            if error.dnsAError != nil || error.dnsAAAAError != nil {
                return "the host name '\(error.host)' does not resolve"
            }
            return "no address of '\(error.host)' answered"
        case let error as IOError:
            return words(errno: error.errnoCode)
        case let error as ChannelError:
            if case .connectTimeout(let timeout) = error {
                return "no answer within \(timeout.nanoseconds / 1_000_000_000) s"
            }
            return nil
        default:
            return nil
        }
    }

    static func words(errno code: Int32) -> String {
        switch code {
        case ECONNREFUSED: "the connection was refused (is PostgreSQL running and listening on that host and port?)"
        case ETIMEDOUT: "the connection timed out"
        case EHOSTUNREACH, ENETUNREACH: "the host cannot be reached"
        case ECONNRESET: "the server closed the connection"
        default: String(cString: strerror(code)).lowercased()
        }
    }
}
