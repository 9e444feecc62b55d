import StoreConformance
import Testing

@testable import SyncCore

/// Hostile query text and trees through the parser, the encoder and the evaluator. A trap would end
/// the test process, so finishing is the main check; parse failures must be ``QueryError``s (the
/// typed throws guarantee it) and what parses must evaluate.
@Suite("Hostile queries (fuzz)")
struct HostileQueryFuzzTests {
    @Test func hostileTextParsesOrFailsWithAQueryErrorAndEvaluates() {
        var random = SeededRandom(seed: 0xBAD_0DA7A)
        let items = HostileQueries.items(&random, count: 24)
        var parsed = 0
        var refused = 0
        for _ in 0..<1_500 {
            let text = HostileQueries.queryText(&random)
            for protocolVersion in ProtocolVersion.allCases {
                do {
                    let query = try TableQuery(odata: text, protocolVersion: protocolVersion)
                    parsed += 1
                    for schema in [TableSchema.schemaless, HostileQueries.typedSchema] {
                        _ = try? QueryEvaluator(schema: schema).evaluate(query, over: items)
                    }
                    // What parses re-encodes to text that parses again (or is refused cleanly: the 2.0.0
                    // protocol version has no literal for some values).
                    _ = try? TableQuery(
                        odata: query.odataQueryString(protocolVersion: protocolVersion),
                        protocolVersion: protocolVersion)
                } catch {
                    refused += 1
                }
            }
        }
        print("◇ hostile query text: \(parsed) parsed and evaluated, \(refused) refused with a QueryError")
        #expect(parsed > 100 && refused > 1_000)
    }

    @Test func hostileTreesEvaluateEncodeAndParseBack() {
        var random = SeededRandom(seed: 0x0DD_BA11)
        let items = HostileQueries.items(&random, count: 24)
        var evaluated = 0
        for _ in 0..<1_500 {
            let query = HostileQueries.query(&random)
            for schema in [TableSchema.schemaless, HostileQueries.typedSchema] {
                let evaluator = QueryEvaluator(schema: schema)
                if (try? evaluator.evaluate(query, over: items)) != nil { evaluated += 1 }
                if let filter = query.filter {
                    for item in items.prefix(6) { _ = evaluator.evaluate(filter, in: item) }
                }
            }
            for protocolVersion in ProtocolVersion.allCases {
                // The encoder writes any tree; its text parses or is refused cleanly (NaN, extreme
                // dates and casts the grammar has no literal for).
                _ = try? TableQuery(
                    odata: query.odataQueryString(protocolVersion: protocolVersion), protocolVersion: protocolVersion)
            }
        }
        #expect(evaluated > 1_000)
    }

    @Test func theDeepestTreesTheValidatorAcceptsEvaluate() throws {
        var random = SeededRandom(seed: 0xDEE9)
        let items = HostileQueries.items(&random, count: 8)
        let depth = QueryLimits.default.maximumDepth
        for _ in 0..<10 {
            let filter = HostileQueries.filter(&random, depth: 3, nesting: depth - 2)
            let query = TableQuery(filter: filter, orderBy: [SortKey(filter)])
            _ = try? QueryEvaluator().evaluate(query, over: items)
        }
        var chain = QueryExpression.field("n")
        for _ in 0..<(depth - 1) { chain = .binary(.add, chain, .literal(.int(.max))) }
        let query = TableQuery(filter: .binary(.greaterThan, chain, .literal(.int(0))), orderBy: [SortKey(chain)])
        #expect(try QueryEvaluator().evaluate(query, over: items).items.count > 0)
    }
}
