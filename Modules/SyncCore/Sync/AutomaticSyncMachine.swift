/// One failure as the status shows it: its code, one line for people, and the HTTP status when the
/// server answered.
public struct SyncProblem: Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure: `network`, `unauthorized`, `remote` (the server failed), …
    public var code: SyncError.Code
    /// One line for people.
    public var message: String
    /// The HTTP status, when the server answered.
    public var status: Int?

    public init(code: SyncError.Code, message: String, status: Int? = nil) {
        self.code = code
        self.message = message
        self.status = status
    }

    /// The problem of `error` (a `SyncError`, a `RemoteError`, or another), in the words of the
    /// server's answer when there was one.
    public init(_ error: any Error) {
        let failure = SyncError.wrapping(error, "sync")
        code = failure.code
        message = (error as? RemoteError)?.message ?? failure.message
        status = failure.remoteError?.status
    }

    public var description: String { message }

    /// Whether the server could not be reached, or refused the client as it is: the network,
    /// credentials, or the server's own failure (5xx, 429, 408). A refused request (4xx) is an answer.
    var meansUnreachable: Bool {
        switch code {
        case .network, .unauthorized: return true
        case .remote:
            guard let status else { return true }
            return status >= 500 || status == 429 || status == 408 || status == 403
        default: return false
        }
    }
}

/// Whether the server answers, as automatic sync last found out.
public enum ServerReachability: Sendable, Hashable, CustomStringConvertible {
    /// Not known yet (nothing asked since the start, or the device is offline).
    case unknown
    /// The server answered; since when it has (the first answer after it last did not).
    case reachable(since: Timestamp)
    /// The server did not answer, or refused the client (401, 5xx); since when, and why.
    case unreachable(since: Timestamp, reason: SyncProblem)

    public var isReachable: Bool {
        if case .reachable = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .unknown: "server not asked yet"
        case .reachable: "server reachable"
        case .unreachable(_, let reason): "server unreachable: \(reason.message)"
        }
    }
}

/// The decisions of automatic sync, apart from doing them: which trigger leads to which push, pull,
/// feed connection or wait, and what the status may say. It takes events (a local write, a hint of
/// the feed, a timer, connectivity, the outcome of a push and pull or of the feed) with the time
/// they happened at, and returns actions for a driver to carry out. No clock, no randomness of its
/// own and no I/O: tests drive it with instants and a seeded generator, and never sleep.
struct AutomaticSyncMachine: Sendable {
    typealias Instant = ContinuousClock.Instant

    /// The timers the machine sets.
    enum Timer: Hashable, Sendable {
        /// The push after a burst of writes, or the retry after a failure.
        case work
        /// The next poll, without a feed.
        case poll
        /// The next attempt to open the feed.
        case openFeed
    }

    /// How a push and its pulls ended.
    struct WorkOutcome: Sendable, Equatable {
        /// Why the push failed, if it did (or left operations the server failed for now).
        var pushProblem: SyncProblem?
        /// Why a pull failed, if one did.
        var pullProblem: SyncProblem?
        /// How long the server asked to wait before the next attempt.
        var retryAfter: Duration?
        /// The push left operations the server failed for now (5xx, 429): send them again.
        var retryFailed = false

        static let success = WorkOutcome()
    }

    /// How a feed ended.
    struct FeedEnd: Sendable, Equatable {
        /// Whether it was open (the server answered 200) before it ended.
        var wasOpen: Bool
        /// Why, when it failed (`nil`: the server ended it).
        var problem: SyncProblem?
        /// How long the server asked to wait before the next attempt.
        var retryAfter: Duration?
    }

    enum Event: Sendable, Equatable {
        /// The queue changed (a local write, or a failed operation settled).
        case queueChanged
        /// The feed says these tables changed.
        case tablesChanged(Set<String>)
        /// The feed said something since the run loop last looked (``FeedHints``): the run loop
        /// turns it into the events above; the machine never sees it.
        case feedHints
        /// The feed opened without a position: everything may have changed.
        case everythingChanged
        /// The feed resumed from its position, and has told every table that changed since.
        case feedCaughtUp
        /// Connectivity, as the monitor says.
        case online(Bool)
        /// A timer the machine set went off.
        case timer(Timer)
        /// The push and pulls of a `.work` action ended.
        case workFinished(WorkOutcome)
        /// What the server said about its change feed (`nil`: it could not be asked).
        case feedOffer(Bool?)
        /// The feed opened (the server answered 200).
        case feedOpened
        /// The feed ended or could not open.
        case feedEnded(FeedEnd)
    }

    enum Action: Sendable, Equatable {
        /// Sets `timer` to go off at `instant`, replacing the one set before.
        case schedule(Timer, at: Instant)
        /// Pushes (when `push`; with `retryFailed`, operations the server failed are sent again),
        /// then pulls the subscriptions of `pull`; answer with `.workFinished`.
        case work(push: Bool, retryFailed: Bool, pull: Set<String>)
        /// Asks whether the server has a change feed; answer with `.feedOffer`.
        case askForFeed
        /// Opens the feed; answer with `.feedOpened`, hints, then `.feedEnded`.
        case openFeed
        /// Closes the feed (the device went offline).
        case closeFeed
        /// Refreshes the queue's counts in the status.
        case refreshCounts
    }

    enum FeedState: Sendable, Equatable {
        case closed
        case opening
        case open
    }

    /// Reachability with the instant it changed (the driver turns it into a wall-clock time).
    enum Reachability: Sendable, Equatable {
        case unknown
        case reachable(since: Instant)
        case unreachable(since: Instant, reason: SyncProblem)
    }

    let tables: Set<String>
    let configuration: AutomaticSyncConfiguration

    private(set) var online = false
    /// Whether the connectivity monitor has spoken yet (until then the device is not said offline).
    private(set) var connectivityKnown = false
    private(set) var pushWanted = true
    private var retryFailed = false
    private(set) var dirty: Set<String>
    private var failures = 0
    private(set) var retryNotBefore: Instant?
    private var workScheduled = false
    private var feedFailures = 0
    /// When the feed last opened; failures are forgiven only once it has stayed open a while.
    private var feedOpenedAt: ContinuousClock.Instant?
    /// How long a feed must stay open for its end to count as normal (a proxy's read timeout, a
    /// server's restart) rather than as one more failure: a feed a server or proxy closes as soon
    /// as it opens was reopened, and the tables pulled, ten times a second.
    static let healthyFeedLifetime = Duration.seconds(30)
    private(set) var feedState = FeedState.closed
    private(set) var offersFeed: Bool?
    private(set) var polling = false
    private var askingForFeed = false
    /// A sync succeeded while the server was being asked about its feed: ask again after the answer,
    /// if it was no (a server that could not be asked at first may well have one).
    private var askAgain = false
    /// The work under way: what a failure puts back.
    private var inFlight: (push: Bool, pull: Set<String>) = (false, [])

    /// Whether the server answers.
    private(set) var reachability = Reachability.unknown
    /// The last failure of a push, until one succeeds.
    private(set) var uploadProblem: SyncProblem?
    /// The last failure of a pull or of the feed, until one succeeds.
    private(set) var downloadProblem: SyncProblem?
    /// With a feed: whether the open feed has told every table that changed (its ready, or the end
    /// of a resumed position's hints). It holds while that feed stays open, whatever a pull meets
    /// meanwhile: the tables a failed pull leaves are still in `dirty`.
    private(set) var feedToldEverything = false
    /// Without a feed: whether every subscription was pulled since the server last started
    /// answering.
    private(set) var pulledSinceReachable = false
    /// The tables the device must pull (successfully) before it is up to date: every one at the
    /// start and when the network comes back, every one the feed's `ready` names, and the ones a
    /// resumed feed names before its `caught-up`. Not the tables of a hint, or of a poll, that
    /// comes once the device is up to date: the device had everything the server had told it of,
    /// and a pull it makes to hear of what changed since (often its own push, echoed by the feed)
    /// does not make it less up to date; a pull that fails does, through ``downloadProblem``.
    private(set) var behind: Set<String>

    init(tables: Set<String>, configuration: AutomaticSyncConfiguration) {
        self.tables = tables
        self.configuration = configuration
        dirty = tables
        behind = tables
    }

    /// Whether the device hears of changes through the feed (when the server has one).
    var feedMode: Bool { offersFeed == true && configuration.usesChangeFeed }

    /// Whether nothing waits: online, the server answering, nothing queued, the device up to date
    /// since the server last started answering (with a feed, an open one that said so, and the
    /// tables it named pulled), no failure since. `queued` is the queue's count, from the store.
    ///
    /// What the device does to stay up to date does not change it: a push with nothing queued
    /// (started by the commits of the push before), and the pull of a hint or a poll once the
    /// device is up to date (see ``behind``). Their failures do.
    func isCaughtUp(queued: Int) -> Bool {
        guard online, case .reachable = reachability, uploadProblem == nil, downloadProblem == nil else { return false }
        guard queued == 0, behind.isEmpty else { return false }
        // Not before it is known how the device hears of changes (the feed, or polling).
        guard !askingForFeed, offersFeed != nil || !configuration.usesChangeFeed else { return false }
        return feedMode ? feedState == .open && feedToldEverything : pulledSinceReachable
    }

    /// Whether the device learns of changes through the feed now.
    var usesChangeFeed: Bool { feedState == .open }

    mutating func handle(_ event: Event, now: Instant, using generator: inout some RandomNumberGenerator)
        -> [Action]
    {
        var actions: [Action] = []
        switch event {
        case .queueChanged:
            pushWanted = true
            guard !workScheduled else { return [] }
            // The first write of a burst: counted at once, pushed shortly after (not before the wait
            // after a failure is over).
            workScheduled = true
            return [.refreshCounts, .schedule(.work, at: max(now + configuration.pushDelay, retryNotBefore ?? now))]
        case .tablesChanged(let changed):
            dirty.formUnion(changed.intersection(tables))
            // A resumed feed's hints, before its caught-up: what changed while the device did not
            // listen, to pull before it is up to date. Afterwards, a hint is news to pull.
            if !feedToldEverything { behind.formUnion(changed.intersection(tables)) }
        case .everythingChanged:
            dirty = tables
            behind = tables
            feedToldEverything = true  // caught up once these pulls succeed
        case .feedCaughtUp:
            feedToldEverything = true
        case .online(let isOnline):
            let cameBack = isOnline && !online
            online = isOnline
            connectivityKnown = true
            guard isOnline else {
                // Offline: nothing is sent, and nothing is known of the server until it is asked again.
                feedState = .closed
                reachability = .unknown
                feedToldEverything = false
                pulledSinceReachable = false
                return [.closeFeed, .refreshCounts]
            }
            guard cameBack else { return [] }
            pushWanted = true
            dirty = tables
            behind = tables
            failures = 0
            retryNotBefore = nil  // a new network: try at once
            actions += offersFeed == true ? openFeedIfWanted() : askForFeedIfWanted(now)
        case .timer(.work):
            workScheduled = false
        case .timer(.poll):
            // Polling stops once the feed is open or opening (it resumes from its position when it
            // drops); while a feed is refused or failing, the device polls rather than hear of
            // nothing (each failure starts polling again).
            guard !feedMode || feedState == .closed else {
                polling = false
                return []
            }
            dirty = tables
            actions.append(.schedule(.poll, at: now + configuration.pollInterval))
        case .timer(.openFeed):
            return openFeedIfWanted()
        case .feedOffer(let offer):
            askingForFeed = false
            if let offer { offersFeed = offer }
            if feedMode {
                polling = false
                askAgain = false
                return openFeedIfWanted()
            }
            if askAgain {
                askAgain = false
                actions += askForFeedIfWanted(now)
            }
            actions += startPolling(now)
        case .feedHints:
            break
        case .feedOpened:
            feedState = .open
            feedOpenedAt = now
            downloadProblem = nil
            answered(now)
            // Not up to date before the feed says so: its ready, or the end of a resumed position's
            // hints, comes first on the stream.
            feedToldEverything = false
            return []
        case .feedEnded(let end):
            feedState = .closed
            feedToldEverything = false
            guard online else { return [] }
            if let problem = end.problem {
                downloadProblem = problem
                // 429 on the feed is the server's answer that it has no place for another feed
                // (every place taken, or feeds turned off): the server answers, and pulls go on.
                if problem.status == 429 {
                    answered(now)
                } else if problem.meansUnreachable {
                    failedToReach(problem, now)
                }
                actions += startPolling(now)
            }
            let lived = end.wasOpen && feedOpenedAt.map { now - $0 >= Self.healthyFeedLifetime } == true
            feedFailures = lived ? 1 : feedFailures + 1
            feedOpenedAt = nil
            // Reconnecting is cheap and the feed is how the device hears of changes: retried fast
            // (from 100 ms, at most every maximumFeedRetryDelay), never sooner than the server asks.
            let wait = Backoff(initial: .milliseconds(100), maximum: configuration.maximumFeedRetryDelay)
                .delay(after: feedFailures, retryAfter: end.retryAfter, using: &generator)
            return actions + [.refreshCounts, .schedule(.openFeed, at: now + wait)]
        case .workFinished(let outcome):
            let problem = outcome.pushProblem ?? outcome.pullProblem
            guard let problem else {
                failures = 0
                uploadProblem = nil
                downloadProblem = nil
                answered(now)
                behind.subtract(inFlight.pull)
                if inFlight.pull == tables && !feedMode { pulledSinceReachable = true }
                if !feedMode && configuration.usesChangeFeed { actions += askForFeedIfWanted(now) }
                actions.append(.refreshCounts)
                return actions + workIfDue(now)
            }
            uploadProblem = outcome.pushProblem
            downloadProblem = outcome.pullProblem ?? downloadProblem
            if problem.meansUnreachable { failedToReach(problem, now) } else { answered(now) }
            guard problem.code == .network || problem.code == .remote || problem.code == .unauthorized else {
                // A refusal that no retry changes (an invalid query, say): it stays in the status.
                return [.refreshCounts]
            }
            // What the work was to do is tried again later.
            pushWanted = pushWanted || inFlight.push || outcome.retryFailed
            retryFailed = retryFailed || outcome.retryFailed
            dirty.formUnion(inFlight.pull)
            failures += 1
            let wait = configuration.retryWait(after: failures, retryAfter: outcome.retryAfter, using: &generator)
            retryNotBefore = now + wait
            workScheduled = true
            return [.refreshCounts, .schedule(.work, at: now + wait)]
        }
        return actions + workIfDue(now)
    }

    /// The work due now, if any: a push when the queue changed, then the pulls of the tables that
    /// changed. Nothing while offline or before the wait after a failure is over.
    private mutating func workIfDue(_ now: Instant) -> [Action] {
        guard online, retryNotBefore.map({ now >= $0 }) ?? true else { return [] }
        retryNotBefore = nil
        guard pushWanted || !dirty.isEmpty else { return [] }
        let action = Action.work(push: pushWanted, retryFailed: retryFailed, pull: dirty)
        // Taken on; a failure puts it back.
        inFlight = (pushWanted, dirty)
        pushWanted = false
        retryFailed = false
        dirty = []
        return [action]
    }

    private mutating func openFeedIfWanted() -> [Action] {
        guard online, feedMode, feedState == .closed else { return [] }
        feedState = .opening
        return [.openFeed]
    }

    private mutating func askForFeedIfWanted(_ now: Instant) -> [Action] {
        guard configuration.usesChangeFeed else { return startPolling(now) }
        guard !askingForFeed else {
            askAgain = true
            return []
        }
        askingForFeed = true
        return [.askForFeed]
    }

    private mutating func startPolling(_ now: Instant) -> [Action] {
        guard !polling else { return [] }
        polling = true
        return [.schedule(.poll, at: now + configuration.pollInterval)]
    }

    /// The server answered: reachable from now, unless it already was.
    private mutating func answered(_ now: Instant) {
        if case .reachable = reachability { return }
        reachability = .reachable(since: now)
        pulledSinceReachable = false
    }

    /// The server could not be reached (or refused the client): unreachable since the first
    /// failure in a row.
    private mutating func failedToReach(_ problem: SyncProblem, _ now: Instant) {
        if case .unreachable(let since, _) = reachability {
            reachability = .unreachable(since: since, reason: problem)
        } else {
            reachability = .unreachable(since: now, reason: problem)
        }
        pulledSinceReachable = false
    }
}
