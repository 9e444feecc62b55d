import StoreConformance
import SyncCore
import Testing

/// Replays every replayable case of the peers' `query-cases.json` through the evaluator over
/// `movies.json` (and the other peer datasets), the way the peers' servers page and count.
@Suite("Peer query cases through the evaluator")
struct PeerQueryReplayTests {
    @Test(.enabled(if: PeerData.isAvailable, PeerData.missingNotice))
    func everyReplayableCaseGivesThePeersAnswer() async throws {
        let cases = try PeerQueryCase.loadAll()
        let replayable = cases.filter(\.replayable)
        #expect(cases.count == 774)
        #expect(replayable.count == 768)
        var datasets: [String: PeerDataset] = [:]
        let outcome = await PeerQueryReplay.run(replayable) { peerCase, query in
            let key = "\(peerCase.dataset)/\(peerCase.deletesRatedR)"
            if datasets[key] == nil {
                datasets[key] = try PeerDataset.load(peerCase.dataset, deletesRatedR: peerCase.deletesRatedR)
            }
            let dataset = datasets[key]!
            return try QueryEvaluator(schema: dataset.definition.schema).evaluate(query, over: dataset.items)
        }
        for failure in outcome.failures.prefix(50) { Issue.record("\(failure.name): \(failure.reason)") }
        print("◇ \(outcome.summary) (evaluator, \(replayable.count) replayable of \(cases.count) cases)")
        #expect(outcome.passed == 768)
    }

    @Test func theSkipNoticeIsVisible() {
        // When the peer data is absent the test above is skipped with this comment, which the
        // runner prints; keep it saying where the data is expected.
        #expect("\(PeerData.missingNotice)".contains("../shared/peer-data"))
    }
}
