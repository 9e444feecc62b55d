@testable import SyncCore
import SyncTesting
import Testing

/// The decisions of automatic sync, driven event by event with instants: no clock, no sleep.
@Suite("Automatic sync's state machine")
struct AutomaticSyncMachineTests {
    typealias Machine = AutomaticSyncMachine
    static let configuration = AutomaticSyncConfiguration(
        pushDelay: .milliseconds(10), pollInterval: .seconds(30), retryDelay: .milliseconds(500),
        maximumRetryDelay: .seconds(60), maximumFeedRetryDelay: .seconds(2))
    static let t0 = ContinuousClock.now

    /// A machine and its time, for one test.
    struct Run {
        var machine = Machine(tables: ["todo", "notes"], configuration: AutomaticSyncMachineTests.configuration)
        var now = AutomaticSyncMachineTests.t0
        var random = SeededGenerator(state: 42)

        mutating func handle(_ event: Machine.Event, after elapsed: Duration = .zero) -> [Machine.Action] {
            now += elapsed
            return machine.handle(event, now: now, using: &random)
        }

        /// When `timer` was set to go off, in `actions`.
        func due(_ timer: Machine.Timer, in actions: [Machine.Action]) -> Duration? {
            for case .schedule(let set, let instant) in actions where set == timer { return instant - now }
            return nil
        }

        func works(_ actions: [Machine.Action]) -> [Machine.Action] {
            actions.filter { if case .work = $0 { true } else { false } }
        }

        static let network = SyncProblem(code: .network, message: "could not connect to the server")

        /// Online with a server that has a feed, the feed open and every table pulled.
        static func synced() -> Run {
            var run = Run()
            _ = run.handle(.online(true))
            _ = run.handle(.workFinished(.success))
            _ = run.handle(.feedOffer(true))
            _ = run.handle(.feedOpened)
            _ = run.handle(.everythingChanged)
            _ = run.handle(.workFinished(.success))
            return run
        }
    }

    @Test func comingOnlineAsksForTheFeedAndPushesAndPullsEverything() {
        var run = Run()
        #expect(run.works(run.handle(.queueChanged)).isEmpty && run.due(.work, in: run.handle(.timer(.work))) == nil)
        let actions = run.handle(.online(true))
        #expect(actions.contains(.askForFeed))
        #expect(actions.contains(.work(push: true, retryFailed: false, pull: ["todo", "notes"])))
    }

    @Test func aBurstOfWritesIsOnePushAfterThePushDelay() {
        var run = Run.synced()
        let first = run.handle(.queueChanged)
        #expect(run.due(.work, in: first) == .milliseconds(10))
        #expect(run.handle(.queueChanged, after: .milliseconds(2)).isEmpty)
        #expect(run.handle(.queueChanged, after: .milliseconds(2)).isEmpty)
        let fired = run.handle(.timer(.work), after: .milliseconds(6))
        #expect(fired == [.work(push: true, retryFailed: false, pull: [])])
    }

    @Test func failuresBackOffExponentiallyAndNothingCutsTheWaitShort() {
        var run = Run.synced()
        var waits: [Duration] = []
        for _ in 0..<10 {
            _ = run.handle(.queueChanged)
            _ = run.handle(.timer(.work), after: .milliseconds(10))
            let failed = run.handle(.workFinished(.init(pushProblem: Run.network)))
            guard let wait = run.due(.work, in: failed) else {
                Issue.record("no retry was set: \(failed)")
                return
            }
            waits.append(wait)
            // A write during the wait does not push before it is over.
            let write = run.handle(.queueChanged, after: wait / 2)
            #expect(run.works(write).isEmpty)
            #expect(run.due(.work, in: write).map { $0 >= wait / 2 } ?? true)
            #expect(run.works(run.handle(.timer(.work), after: wait / 2)).count == 1, "the retry runs when due")
        }
        for (index, wait) in waits.enumerated() {
            let base = min(Duration.milliseconds(500) * (1 << index), .seconds(60))
            #expect(wait >= base / 2 && wait <= base, "retry \(index + 1): \(wait), base \(base)")
        }
    }

    @Test func theServersRetryAfterIsWaitedWhateverTheBackoff() {
        var run = Run.synced()
        _ = run.handle(.queueChanged)
        _ = run.handle(.timer(.work), after: .milliseconds(10))
        let failed = run.handle(
            .workFinished(
                .init(pushProblem: SyncProblem(code: .remote, message: "busy", status: 503), retryAfter: .seconds(30))))
        #expect(run.due(.work, in: failed) == .seconds(30))
        // A timer set earlier (a burst's push) going off before then does nothing.
        #expect(run.works(run.handle(.timer(.work), after: .seconds(1))).isEmpty)
        #expect(run.works(run.handle(.timer(.work), after: .seconds(29))).count == 1)
    }

    @Test func aServerThatCouldNotBeAskedAtFirstIsAskedAgainAfterASync() {
        // The bug CI found: a server down at start was polled once an hour from then on.
        var run = Run()
        _ = run.handle(.online(true))
        let afterSync = run.handle(.workFinished(.success))
        #expect(!afterSync.contains(.askForFeed), "still waiting for the first answer")
        let noAnswer = run.handle(.feedOffer(nil))
        #expect(noAnswer.contains(.askForFeed), "asked again: a sync succeeded meanwhile")
        #expect(run.handle(.feedOffer(true)).contains(.openFeed))
        #expect(run.handle(.timer(.poll), after: .seconds(30)).isEmpty, "no polling once the feed is there")
    }

    @Test func theDeviceIsCaughtUpOnlyOnceTheFeedSaidSoAndItsHintsArePulled() {
        var run = Run()
        _ = run.handle(.online(true))
        _ = run.handle(.workFinished(.success))
        _ = run.handle(.feedOffer(true))
        #expect(!run.machine.isCaughtUp(queued: 0), "the feed is not open yet")
        _ = run.handle(.feedOpened)
        #expect(!run.machine.isCaughtUp(queued: 0), "the feed has not said it is up to date")
        let ready = run.handle(.everythingChanged)
        #expect(ready == [.work(push: false, retryFailed: false, pull: ["todo", "notes"])])
        #expect(!run.machine.isCaughtUp(queued: 0), "not before the pulls the feed asked for succeed")
        _ = run.handle(.workFinished(.success))
        #expect(run.machine.isCaughtUp(queued: 0))
        #expect(!run.machine.isCaughtUp(queued: 1))
    }

    /// The UI's "everything synced" blinked after every edit: the push's own commits to the queue
    /// asked for another push, and the feed hinted the device's own write back. Once the push is
    /// done, neither takes caught up away; a failure of the hint's pull still does.
    @Test func thePushesOwnCommitsAndTheFeedsEchoOfThemKeepTheDeviceCaughtUp() {
        var run = Run.synced()
        _ = run.handle(.queueChanged)  // a local write
        #expect(!run.machine.isCaughtUp(queued: 1), "a write waits")
        let push = run.handle(.timer(.work), after: .milliseconds(10))
        #expect(push == [.work(push: true, retryFailed: false, pull: [])])
        _ = run.handle(.workFinished(.success))
        #expect(run.machine.isCaughtUp(queued: 0), "pushed")
        // The push marked the operation in flight and completed it: two commits to the queue.
        let again = run.handle(.queueChanged)
        #expect(run.machine.isCaughtUp(queued: 0), "the push's own commits, nothing queued")
        _ = run.handle(.queueChanged)
        #expect(run.machine.isCaughtUp(queued: 0))
        // The feed echoes the write: the table is pulled, the status stays.
        let echo = run.handle(.tablesChanged(["todo"]), after: .milliseconds(1))
        #expect(echo == [.work(push: true, retryFailed: false, pull: ["todo"])], "\(again) then \(echo)")
        #expect(run.machine.isCaughtUp(queued: 0), "while the hint's pull runs")
        _ = run.handle(.workFinished(.success))
        #expect(run.machine.isCaughtUp(queued: 0))
        // The promises stay: the queue, and a failed pull, each make it false.
        #expect(!run.machine.isCaughtUp(queued: 1))
        _ = run.handle(.tablesChanged(["notes"]))
        _ = run.handle(.workFinished(.init(pullProblem: Run.network)))
        #expect(!run.machine.isCaughtUp(queued: 0), "the hint's pull failed")
    }

    @Test func aPullThatFailsWhileTheFeedStaysOpenIsCaughtUpOnceItsRetrySucceeds() {
        // What CI found on PostgreSQL: the server's storage failed a pull (HTTP 500) just after the
        // feed's ready; the retry succeeded, and the device never said it was caught up again.
        var run = Run()
        _ = run.handle(.online(true))
        _ = run.handle(.workFinished(.success))
        _ = run.handle(.feedOffer(true))
        _ = run.handle(.feedOpened)
        _ = run.handle(.everythingChanged)
        let failure = SyncProblem(code: .remote, message: "the server's storage failed", status: 500)
        let failed = run.handle(.workFinished(.init(pullProblem: failure)))
        #expect(!run.machine.isCaughtUp(queued: 0), "a pull failed")
        guard let wait = run.due(.work, in: failed) else {
            Issue.record("no retry was set: \(failed)")
            return
        }
        #expect(
            run.handle(.timer(.work), after: wait) == [
                .work(push: false, retryFailed: false, pull: ["todo", "notes"])
            ],
            "the retry pulls what the failed pull had to")
        _ = run.handle(.workFinished(.success))
        #expect(run.machine.isCaughtUp(queued: 0), "the feed stayed open and every hint is pulled")
        // A feed that ends, though, has to say so again once reopened.
        _ = run.handle(.feedEnded(.init(wasOpen: true, problem: nil)))
        _ = run.handle(.timer(.openFeed), after: .seconds(2))
        _ = run.handle(.feedOpened)
        #expect(!run.machine.isCaughtUp(queued: 0), "not before the reopened feed's hints")
        _ = run.handle(.feedCaughtUp)
        #expect(run.machine.isCaughtUp(queued: 0))
    }

    @Test func aDeadFeedMakesTheServerUnreachableAndIsReopenedSoonButNotTooOften() {
        var run = Run.synced()
        #expect(run.machine.isCaughtUp(queued: 0))
        // The server goes away: the feed ends, and cannot open again.
        var actions = run.handle(.feedEnded(.init(wasOpen: true, problem: nil)))
        #expect(!run.machine.isCaughtUp(queued: 0), "a closed feed hears nothing")
        var attempts = 0
        var elapsed = Duration.zero
        var waits: [Duration] = []
        while elapsed < .seconds(60) {
            guard let wait = run.due(.openFeed, in: actions) else {
                Issue.record("the feed is not reopened: \(actions)")
                return
            }
            waits.append(wait)
            elapsed += wait
            #expect(run.handle(.timer(.openFeed), after: wait) == [.openFeed])
            attempts += 1
            actions = run.handle(.feedEnded(.init(wasOpen: false, problem: Run.network)))
        }
        guard case .unreachable(let since, let reason) = run.machine.reachability else {
            Issue.record("not unreachable: \(run.machine.reachability)")
            return
        }
        #expect(reason.code == .network)
        #expect(since < Self.t0 + waits[0] + .milliseconds(1), "unreachable since the first failed attempt")
        #expect(waits.allSatisfy { $0 <= .seconds(2) }, "\(waits)")
        #expect(attempts <= 60, "\(attempts) attempts in a minute")
        #expect(waits.suffix(10).allSatisfy { $0 >= .seconds(1) }, "\(waits.suffix(10))")
        // It comes back: the next attempt (at most 2 s later) opens the feed, which resumes.
        #expect(run.handle(.timer(.openFeed), after: waits.last!) == [.openFeed])
        _ = run.handle(.feedOpened)
        #expect(run.machine.reachability == .reachable(since: run.now))
        #expect(!run.machine.isCaughtUp(queued: 0), "not before the resumed position's hints")
        #expect(run.handle(.tablesChanged(["todo"])) == [.work(push: false, retryFailed: false, pull: ["todo"])])
        _ = run.handle(.feedCaughtUp)
        _ = run.handle(.workFinished(.success))
        #expect(run.machine.isCaughtUp(queued: 0))
    }

    /// A server or proxy that closes the feed as soon as it opens (cleanly, every time) was
    /// reopened, and the tables pulled, about ten times a second: such ends are failures, backed off
    /// like the others, until a feed stays open for a while again.
    @Test func aFeedClosedAsSoonAsItOpensIsBackedOff() {
        var run = Run.synced()
        var waits: [Duration] = []
        var actions = run.handle(.feedEnded(.init(wasOpen: true, problem: nil)))
        for _ in 0..<12 {
            guard let wait = run.due(.openFeed, in: actions) else {
                Issue.record("the feed is not reopened: \(actions)")
                return
            }
            waits.append(wait)
            _ = run.handle(.timer(.openFeed), after: wait)
            _ = run.handle(.feedOpened)
            actions = run.handle(.feedEnded(.init(wasOpen: true, problem: nil)), after: .milliseconds(5))
        }
        #expect(waits.suffix(4).allSatisfy { $0 >= .seconds(1) }, "\(waits)")
        #expect(waits.reduce(.zero, +) >= .seconds(10), "12 reopenings in \(waits.reduce(.zero, +))")
        // A feed that stays open a while and then ends is reopened soon again.
        _ = run.handle(.timer(.openFeed), after: run.due(.openFeed, in: actions) ?? .zero)
        _ = run.handle(.feedOpened)
        actions = run.handle(.feedEnded(.init(wasOpen: true, problem: nil)), after: .seconds(60))
        #expect(run.due(.openFeed, in: actions).map { $0 <= .milliseconds(200) } == true, "\(actions)")
    }

    @Test func aFeedIsNeverReopenedSoonerThanTheServerAsked() {
        var run = Run.synced()
        var actions = run.handle(.feedEnded(.init(wasOpen: true, problem: Run.network, retryAfter: .seconds(3))))
        #expect(run.due(.openFeed, in: actions) == .seconds(3), "the server's retry: beyond the usual 2 s")
        _ = run.handle(.timer(.openFeed), after: .seconds(3))
        actions = run.handle(.feedEnded(.init(wasOpen: false, problem: Run.network, retryAfter: .milliseconds(700))))
        #expect(run.due(.openFeed, in: actions).map { $0 >= .milliseconds(700) } == true)
    }

    @Test func aRefusedTokenOnTheFeedShowsAsUnreachableWithItsCode() {
        var run = Run.synced()
        _ = run.handle(
            .feedEnded(.init(wasOpen: false, problem: SyncProblem(code: .unauthorized, message: "401", status: 401))))
        guard case .unreachable(_, let reason) = run.machine.reachability else {
            Issue.record("\(run.machine.reachability)")
            return
        }
        #expect(reason.code == .unauthorized)
        #expect(run.machine.downloadProblem?.status == 401)
    }

    /// A server that refuses the feed (429: every place taken, or feeds turned off) still answers
    /// pulls: the device polls meanwhile (it heard of no change at all before) and does not call
    /// the server unreachable; once a feed is open again, polling stops.
    @Test func aRefusedFeedIsPolledMeanwhileAndTheServerStillAnswers() {
        var run = Run.synced()
        let full = SyncProblem(code: .remote, message: "too many change feeds are open", status: 429)
        let refused = run.handle(.feedEnded(.init(wasOpen: false, problem: full, retryAfter: .seconds(60))))
        #expect(run.machine.reachability.isReachableForTests, "\(run.machine.reachability)")
        #expect(run.due(.poll, in: refused) == .seconds(30), "\(refused)")
        let poll = run.handle(.timer(.poll), after: .seconds(30))
        #expect(poll.contains(.work(push: false, retryFailed: false, pull: ["todo", "notes"])), "\(poll)")
        #expect(run.due(.poll, in: poll) == .seconds(30))
        _ = run.handle(.workFinished(.success))
        _ = run.handle(.timer(.openFeed), after: .seconds(30))
        _ = run.handle(.feedOpened)
        #expect(run.handle(.timer(.poll), after: .seconds(30)).isEmpty, "no polling once the feed is open")
        // A feed that cannot connect at all still means the server is unreachable.
        _ = run.handle(.feedEnded(.init(wasOpen: true, problem: Run.network)))
        #expect(!run.machine.reachability.isReachableForTests)
    }

    @Test func aFailedPushIsAnUploadProblemAndAFailedPullADownloadOne() {
        var run = Run.synced()
        _ = run.handle(.queueChanged)
        _ = run.handle(.timer(.work), after: .milliseconds(10))
        _ = run.handle(.workFinished(.init(pushProblem: Run.network)))
        #expect(run.machine.uploadProblem == Run.network && run.machine.downloadProblem == nil)
        let refused = SyncProblem(code: .invalidQuery, message: "the filter is invalid", status: 400)
        var other = Run.synced()
        _ = other.handle(.tablesChanged(["todo"]))
        _ = other.handle(.workFinished(.init(pullProblem: refused)))
        #expect(other.machine.downloadProblem == refused && other.machine.uploadProblem == nil)
        #expect(other.machine.reachability.isReachableForTests, "a refusal is an answer")
    }

    @Test func offlineSendsNothingAndForgetsWhatItKnewOfTheServer() {
        var run = Run.synced()
        #expect(run.handle(.online(false)).contains(.closeFeed))
        #expect(run.machine.reachability == .unknown)
        _ = run.handle(.queueChanged)
        #expect(run.works(run.handle(.timer(.work), after: .seconds(1))).isEmpty)
        let back = run.handle(.online(true))
        #expect(back.contains(.openFeed))
        #expect(back.contains(.work(push: true, retryFailed: false, pull: ["todo", "notes"])))
    }

    @Test func withoutAFeedTheDeviceIsCaughtUpAfterAFullPullAndPolls() {
        var run = Run()
        _ = run.handle(.online(true))
        _ = run.handle(.workFinished(.success))
        let noFeed = run.handle(.feedOffer(false))
        #expect(run.due(.poll, in: noFeed) == .seconds(30))
        // Asked again (a sync succeeded while it was asked): up to date once the answer is in.
        #expect(noFeed.contains(.askForFeed))
        #expect(!run.machine.isCaughtUp(queued: 0), "not before it is known how changes come")
        _ = run.handle(.feedOffer(false))
        #expect(run.machine.isCaughtUp(queued: 0))
        let poll = run.handle(.timer(.poll), after: .seconds(30))
        #expect(poll.contains(.work(push: false, retryFailed: false, pull: ["todo", "notes"])))
        #expect(run.due(.poll, in: poll) == .seconds(30))
    }
}

extension AutomaticSyncMachine.Reachability {
    var isReachableForTests: Bool {
        if case .reachable = self { return true }
        return false
    }
}
