#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The process's limit on open files (RLIMIT_NOFILE), which bounds the connections `ferry serve`
/// can hold: every connection, an open change feed included, is a file descriptor.
///
/// ```swift
/// let limit = OpenFileLimit.raise()          // soft limit up to the hard one
/// if let limit, limit < OpenFileLimit.needed(connections: 16_384) { … warn … }
/// ```
enum OpenFileLimit {
    /// Descriptors a server needs besides its connections: the listening socket, the event loops'
    /// epoll and wake-up descriptors, the database (SQLite's files, or PostgreSQL's pool and
    /// listener), standard streams and a margin.
    static let reserve = 128

    /// The descriptors a server holding `connections` connections needs.
    static func needed(connections: Int) -> Int { connections + reserve }

    /// Raises the soft limit to the hard one (the most a process may take without privileges) and
    /// answers the soft limit in force afterwards; `nil` when it cannot be read.
    static func raise() -> Int? {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return nil }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            // An unlimited hard limit is not a soft limit every system takes (macOS caps it at
            // OPEN_MAX, Linux at fs.nr_open): try the hard limit, then a common ceiling.
            if setrlimit(resource, &raised) != 0 {
                raised.rlim_cur = min(limit.rlim_max, rlim_t(ceiling))
                if raised.rlim_cur > limit.rlim_cur { _ = setrlimit(resource, &raised) }
            }
            guard getrlimit(resource, &limit) == 0 else { return nil }
        }
        return limit.rlim_cur >= rlim_t(Int.max) ? Int.max : Int(limit.rlim_cur)
    }

    /// The one line `ferry serve` logs when `limit` is below what `connections` need; `nil` when it is
    /// enough.
    static func shortfall(limit: Int, connections: Int) -> String? {
        let needed = needed(connections: connections)
        guard limit < needed else { return nil }
        return
            "the open-file limit is \(limit), below the \(needed) that --max-connections \(connections) needs (one descriptor per connection, plus \(reserve)): raise it (ulimit -n, systemd LimitNOFILE=) or lower --max-connections"
    }

    #if canImport(Glibc)
        private static let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        private static let ceiling = 1 << 20
    #else
        private static let resource = RLIMIT_NOFILE
        private static let ceiling = Int(OPEN_MAX)
    #endif
}
