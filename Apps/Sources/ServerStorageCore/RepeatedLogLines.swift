package import Logging
import Synchronization

/// Log lines that repeat while a resource is down (a listener that cannot reach its database
/// retries every 2 s): the first of each message is logged, its repeats are counted and said in one
/// line at most once per ``window`` ("… 29 more in the last 60 s"), and the end of the outage is
/// one line with how many there were. An outage of PostgreSQL logged 34 lines a minute.
///
/// ```swift
/// switch lines.occurred("the change listener cannot connect; retrying") {
/// case .log: logger.warning("the change listener cannot connect; retrying")
/// case .summary(let repeats, let over): logger.warning("… (\(repeats) more in the last \(over))")
/// case .quiet: break
/// }
/// if let outage = lines.ended() { logger.notice("connected again after \(outage.lines) failures") }
/// ```
package final class RepeatedLogLines: Sendable {
    /// What to do with a line.
    package enum Verdict: Equatable, Sendable {
        /// Log it: the first of its message since the outage began (or since the message last changed).
        case log
        /// Log it with how many repeats were held back since its message was last logged, and over
        /// how long.
        case summary(repeats: Int, over: Duration)
        /// Hold it back (it is counted).
        case quiet
    }

    /// An outage that ended: how many lines it had in all, and how long it lasted from its first.
    package struct Outage: Equatable, Sendable {
        package var lines: Int
        package var lasted: Duration
    }

    private struct Run {
        var logged: ContinuousClock.Instant
        var heldBack = 0
    }

    private struct State {
        var runs: [String: Run] = [:]
        var began: ContinuousClock.Instant?
        var lines = 0
    }

    /// The least time between two lines of one message.
    package let window: Duration
    private let now: @Sendable () -> ContinuousClock.Instant
    private let state = Mutex(State())

    /// `now` is the clock (tests pass instants of their own).
    package init(
        window: Duration = .seconds(60), now: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.window = window
        self.now = now
    }

    /// A line with `message` is due: whether to log it.
    package func occurred(_ message: String) -> Verdict {
        let time = now()
        return state.withLock { state in
            state.began = state.began ?? time
            state.lines += 1
            guard var run = state.runs[message] else {
                state.runs[message] = Run(logged: time)
                return .log
            }
            run.heldBack += 1
            let elapsed = time - run.logged
            guard elapsed >= window else {
                state.runs[message] = run
                return .quiet
            }
            state.runs[message] = Run(logged: time)
            return .summary(repeats: run.heldBack, over: elapsed)
        }
    }

    /// The resource is back: the outage that ended, or `nil` when there was none. The next line
    /// after it is logged again.
    package func ended() -> Outage? {
        let time = now()
        return state.withLock { state in
            guard let began = state.began else { return nil }
            let outage = Outage(lines: state.lines, lasted: time - began)
            state = State()
            return outage
        }
    }
}

/// A log handler that lets lines at `info` and above through ``RepeatedLogLines``: for a
/// database driver's background logger, whose "connection failed" repeats through an outage.
package struct RepeatLimitedLogHandler: LogHandler {
    package var inner: any LogHandler
    package let lines: RepeatedLogLines

    package init(_ inner: any LogHandler, lines: RepeatedLogLines) {
        self.inner = inner
        self.lines = lines
    }

    package var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    package var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    package func log(event: LogEvent) {
        guard event.level >= .info else { return inner.log(event: event) }
        var event = event
        switch lines.occurred("\(event.message)") {
        case .log: break
        case .quiet: return
        case .summary(let repeats, let over):
            event.message = "\(event.message) (\(repeats) more in the last \(over.components.seconds) s)"
        }
        inner.log(event: event)
    }
}
