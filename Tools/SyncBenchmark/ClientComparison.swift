import Foundation
import StoreSQLite
import SyncCore
import Transport

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The HTTP client a benchmark's remote sends through.
enum HTTPClientChoice: String, CaseIterable, Sendable {
    /// What `HTTPRemote` picks without a session: AsyncHTTPClient on Linux, `URLSession` elsewhere.
    case platform
    /// An ephemeral `URLSession` (FoundationNetworking on Linux).
    case urlSession

    var label: String {
        switch self {
        case .platform:
            #if os(Linux)
                "AsyncHTTPClient"
            #else
                "URLSession (platform)"
            #endif
        case .urlSession: "URLSession"
        }
    }

    func remote(_ url: URL) -> HTTPRemote {
        let configuration = HTTPRemote.Configuration(serverURL: url, retry: .init(maximumAttempts: 1))
        switch self {
        case .platform: return HTTPRemote(configuration)
        case .urlSession: return HTTPRemote(configuration, session: URLSession(configuration: .ephemeral))
        }
    }
}

/// `--compare-clients`: the same pull of `--rows` rows and push of `--push` inserts (batched, and one
/// request each) through every HTTP client, in one run against the same servers; wall time and
/// this process's CPU time (the server is another process), with each client's ratio to
/// `URLSession`'s.
enum ClientComparison {
    struct Figures {
        var pull: (seconds: Double, cpu: Double)
        var batched: (seconds: Double, cpu: Double)
        var single: (seconds: Double, cpu: Double)
    }

    static func run(options: Options, directory: URL) async throws {
        let database = directory.appendingPathComponent("server-compare.sqlite").path
        print("\nseeding \(options.rows) rows…")
        try await Seeder.seed(database: database, rows: options.rows, directory: directory)
        let server = try ServerProcess.start(database: database, directory: directory, page: options.page)
        defer { server.stop() }
        let push = max(1, options.push)
        var figures: [HTTPClientChoice: Figures] = [:]
        // Two rounds, alternating, so that neither client always runs on a colder machine.
        for round in 1...2 {
            for client in HTTPClientChoice.allCases {
                let pull = try await pullOnce(server.url, client, options, directory, round)
                let batched = try await pushOnce(client, options, directory, push, protocolOnly: false, round)
                let single = try await pushOnce(client, options, directory, push, protocolOnly: true, round)
                let best = Figures(pull: pull, batched: batched, single: single)
                if let earlier = figures[client] {
                    func faster(_ a: (seconds: Double, cpu: Double), _ b: (seconds: Double, cpu: Double)) -> (
                        seconds: Double, cpu: Double
                    ) { a.seconds <= b.seconds ? a : b }
                    figures[client] = Figures(
                        pull: faster(earlier.pull, best.pull), batched: faster(earlier.batched, best.batched),
                        single: faster(earlier.single, best.single))
                } else {
                    figures[client] = best
                }
            }
        }
        guard let reference = figures[.urlSession] else { return }
        print("\nHTTP clients, best of 2 rounds (wall s / this process's CPU s; ratio to URLSession's wall time)")
        for client in HTTPClientChoice.allCases {
            guard let row = figures[client] else { continue }
            func cell(_ value: (seconds: Double, cpu: Double), _ base: (seconds: Double, cpu: Double)) -> String {
                "\(SyncBenchmarkMain.format(value.seconds)) / \(SyncBenchmarkMain.format(value.cpu)) (\(SyncBenchmarkMain.format(value.seconds / base.seconds))x)"
            }
            print("  \(client.label.padding(toLength: 16, withPad: " ", startingAt: 0))", terminator: "")
            print("  pull \(options.rows): \(cell(row.pull, reference.pull))", terminator: "")
            print("  push \(push) batched: \(cell(row.batched, reference.batched))", terminator: "")
            print("  one each: \(cell(row.single, reference.single))")
        }
    }

    static func pullOnce(
        _ url: URL, _ client: HTTPClientChoice, _ options: Options, _ directory: URL, _ round: Int
    ) async throws -> (seconds: Double, cpu: Double) {
        let path = directory.appendingPathComponent("compare-pull-\(client.rawValue)-\(round).sqlite").path
        let store = try SQLiteStore(path: path)
        let context = SyncContext(store: store, remote: client.remote(url))
        let cpu = CPUTime.now()
        let seconds = try await Clock.measure {
            let result = try await context.pull("bench", queryID: "all", options: PullOptions(pageSize: options.page))
            guard result.items.received == options.rows + 1 else {
                throw BenchmarkError(
                    "\(client.label): the pull received \(result.items.received) of \(options.rows + 1)")
            }
        }
        let spent = CPUTime.now() - cpu
        try await store.close()
        return (seconds, spent)
    }

    static func pushOnce(
        _ client: HTTPClientChoice, _ options: Options, _ directory: URL, _ count: Int, protocolOnly: Bool,
        _ round: Int
    ) async throws -> (seconds: Double, cpu: Double) {
        var options = options
        options.push = count
        let folder = directory.appendingPathComponent("round-\(round)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let (rate, cpu, _) = try await SyncBenchmarkMain.pushBenchmark(
            options: options, directory: folder, protocolOnly: protocolOnly, client: client)
        return (Double(count) / rate, cpu)
    }
}

/// This process's CPU time (user and system), in seconds.
enum CPUTime {
    static func now() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// User and system CPU time of process `pid` (all its threads), from /proc; 0 where unreadable.
    static func of(_ pid: Int32) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let end = text.lastIndex(of: ")")
        else { return 0 }
        // After "pid (name) ": state is field 3; utime and stime are fields 14 and 15.
        let fields = text[text.index(after: end)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
