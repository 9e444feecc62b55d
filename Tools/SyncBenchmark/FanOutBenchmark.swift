// Change-feed fan-out (`--fan-out 1000,10000`): for each count, a fresh `ferry serve` (SQLite,
// default limits) and that many change feeds of one table opened from this process over plain
// sockets (FeedSockets: one thread, epoll), then `--fan-out-writes` inserts one after the other. Per
// write: the time from sending it until the first and the last feed received its event (p50, p99),
// and the write's own answer. Beside it, the same with 1 feed in the same run (the baseline: the
// write and one delivery). The server's RSS before and after opening the feeds gives its memory per
// feed; the CPU time of the server and of this process during the writes, per event delivered, says
// what the server spends and what the client (on the same machine) takes from it. Then the floor
// (FanOutFloor.swift): the same reader and feeds served by plain write() calls, this machine's limit.
#if canImport(Glibc)
    import Foundation
    import Glibc
    import Synchronization

    enum FanOutBenchmark {
        struct Result {
            var feeds: Int
            var openSeconds: Double
            var last: [Double]  // ms, sorted
            var first: [Double]
            var answered: [Double]
            var bytesPerFeed: Double
            var serverMicrosecondsPerEvent: Double
            var clientMicrosecondsPerEvent: Double
            var refused: Int
        }

        static func run(options: Options, directory: URL) async throws {
            let limit = Sockets.raiseOpenFileLimit()
            let counts = [1] + options.fanOutCounts
            guard limit > (counts.max() ?? 0) + 64 else {
                throw BenchmarkError(
                    "the open-file limit is \(limit): \(counts.max() ?? 0) feeds need more (ulimit -n, as root: ulimit -Hn)"
                )
            }
            print(
                "\nchange-feed fan-out: N feeds of one table on one ferry serve (SQLite, default limits), \(options.fanOutWrites) writes one after the other"
            )
            print("  time from sending a write until the first / the last feed has its event; the write's own answer")
            print(
                "  feeds  opened in   last p50   last p99  first p50  answer p50  server RSS/feed  server CPU/event  client CPU/event"
            )
            var baseline: Result?
            var results: [Int: Result] = [:]
            for count in counts {
                let writes = options.fanOutWrites
                let result = try await onThread { try measure(count, writes: writes, directory: directory) }
                if baseline == nil { baseline = result }
                results[count] = result
                print(line(result, baseline: baseline!))
            }
            print(
                "  floor: the same reader and feeds, served by one thread of this process that write()s each feed's event (FanOutFloor.swift)"
            )
            for count in options.fanOutCounts {
                let writes = options.fanOutWrites
                let floor: Result
                do {
                    floor = try await onThread { try measureFloor(count, writes: writes) }
                } catch {
                    print(pad(count, 7) + "  floor not measured: \(error)")
                    continue
                }
                let ferry = percentile(results[count]?.last ?? [], 0.99)
                print(
                    pad(floor.feeds, 7) + String(format: "  %7.1f s", floor.openSeconds) + "  "
                        + String(
                            format: "%7.1f ms  %7.1f ms", percentile(floor.last, 0.5), percentile(floor.last, 0.99))
                        + String(
                            format: "  (process CPU/event %.1f µs; Ferry's last p99 %.1fx this)",
                            floor.clientMicrosecondsPerEvent, ferry / max(0.001, percentile(floor.last, 0.99))))
            }
            print(
                "  anchor (the issue's, not measured here): Electric's SSE fan-out, p50 about 4 ms at 1,000 subscribers"
            )
        }

        static func line(_ result: Result, baseline: Result) -> String {
            func ms(_ values: [Double], _ p: Double) -> String { String(format: "%7.1f ms", percentile(values, p)) }
            let ratio = percentile(result.last, 0.5) / max(0.001, percentile(baseline.last, 0.5))
            var text =
                pad(result.feeds, 7) + String(format: "  %7.1f s", result.openSeconds) + "  " + ms(result.last, 0.5)
                + "  " + ms(result.last, 0.99) + "  " + ms(result.first, 0.5) + "   " + ms(result.answered, 0.5)
            text +=
                result.feeds > 1
                ? String(format: "  %10.1f KiB", result.bytesPerFeed / 1024) : "               —"
            text += String(
                format: "  %13.1f µs  %13.1f µs", result.serverMicrosecondsPerEvent, result.clientMicrosecondsPerEvent)
            if result.feeds > 1 { text += String(format: "   (last p50 %.1fx the 1-feed baseline)", ratio) }
            if result.refused > 0 { text += "  \(result.refused) refused" }
            return text
        }

        static func measure(_ count: Int, writes: Int, directory: URL) throws -> Result {
            let database = directory.appendingPathComponent("server-fanout-\(count).sqlite").path
            try runBlocking { try await Seeder.seed(database: database, rows: 0, directory: directory) }
            // The defaults hold 10,000 feeds; beyond, the limits grow with the count.
            let extra =
                count > 10_000 ? ["--max-feeds", "\(count)", "--max-connections", "\(count + 1_024)"] : []
            let server = try ServerProcess.start(
                database: database, directory: directory, page: 1_000, extraArguments: extra)
            defer { server.stop() }
            guard let port = server.url.port else { throw BenchmarkError("no port in \(server.url)") }
            let pid = server.process.processIdentifier
            let writer = try PlainConnection(port: port)
            let warmUp = 5
            let feeds = FeedSockets(port: port, table: "bench", writes: warmUp + writes + 1)
            defer { feeds.close() }
            var index = 0
            var made = 0
            func write() throws -> Double {
                index += 1
                made += 1
                let start = Monotonic.now()
                let status = try writer.post("/tables/bench", json: #"{"id":"fan-\#(made)","title":"fan-out"}"#)
                guard status == 201 else { throw BenchmarkError("a write was answered \(status)") }
                return Double(Monotonic.now() - start) / 1e6
            }
            _ = try write()  // the server's first write (table, caches) before its RSS is read
            usleep(300_000)
            let before = residentBytes(pid)
            let opening = Monotonic.now()
            try feeds.open(count)
            let openSeconds = Double(Monotonic.now() - opening) / 1e9
            let opened = feeds.snapshot
            guard opened.ready == count else {
                throw BenchmarkError("\(opened.ready) of \(count) feeds started (\(opened.refused) refused)")
            }
            index = 0  // the feeds count writes from the version their ready event told
            for _ in 0..<warmUp {
                _ = try write()
                guard feeds.wait(write: index, feeds: count, timeout: 30) else {
                    throw BenchmarkError(
                        "a warm-up write reached \(feeds.snapshot.arrivals[index].count) of \(count) feeds")
                }
            }
            usleep(300_000)
            let after = residentBytes(pid)
            var answered: [Double] = []
            var first: [Double] = []
            var last: [Double] = []
            let serverCPU = CPUTime.of(pid)
            let clientCPU = CPUTime.now()
            for _ in 0..<writes {
                let started = Monotonic.now()
                answered.append(try write())
                guard feeds.wait(write: index, feeds: count, timeout: 30) else {
                    throw BenchmarkError(
                        "write \(index) reached \(feeds.snapshot.arrivals[index].count) of \(count) feeds")
                }
                let arrival = feeds.snapshot.arrivals[index]
                first.append(Double(arrival.first - started) / 1e6)
                last.append(Double(arrival.last - started) / 1e6)
                usleep(10_000)  // each write alone
            }
            let events = Double(writes * count)
            let result = Result(
                feeds: count, openSeconds: openSeconds, last: last.sorted(), first: first.sorted(),
                answered: answered.sorted(), bytesPerFeed: Double(after - before) / Double(count),
                serverMicrosecondsPerEvent: (CPUTime.of(pid) - serverCPU) * 1e6 / events,
                clientMicrosecondsPerEvent: (CPUTime.now() - clientCPU) * 1e6 / events,
                refused: feeds.snapshot.refused)
            return result
        }

        static func percentile(_ sorted: [Double], _ p: Double) -> Double {
            sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
        }

        static func pad(_ value: Int, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: " ", count: max(0, width - text.count)) + text
        }

        /// VmRSS of process `pid`, from /proc.
        static func residentBytes(_ pid: Int32) -> Int {
            guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
            for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
                return (Int(line.filter(\.isNumber)) ?? 0) * 1024
            }
            return 0
        }

        /// Runs `body` on a thread of its own: the measurement blocks (sockets, waits), which the
        /// concurrency pool's few threads must not.
        static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
            try await withCheckedThrowingContinuation { continuation in
                let thread = Thread { continuation.resume(with: Swift.Result { try body() }) }
                thread.stackSize = 4 << 20
                thread.start()
            }
        }

        /// Runs async `body` from this synchronous measurement (its own thread waits).
        static func runBlocking(_ body: @escaping @Sendable () async throws -> Void) throws {
            let done = DispatchSemaphore(value: 0)
            let failure = Mutex<(any Error)?>(nil)
            Task {
                do { try await body() } catch { failure.withLock { $0 = error } }
                done.signal()
            }
            done.wait()
            if let error = failure.withLock({ $0 }) { throw error }
        }
    }
#endif
