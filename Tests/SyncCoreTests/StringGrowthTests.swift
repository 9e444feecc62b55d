import Testing

@testable import SyncCore

/// Queries whose strings could grow without bound are refused before anything runs, on every
/// store and on the server (which validates with the same evaluator).
@Suite("Query string growth")
struct StringGrowthTests {
    private func filter(_ text: String) throws -> TableQuery {
        TableQuery(filter: try QueryExpression(odataFilter: text, protocolVersion: .v3))
    }

    private func nested(_ levels: Int, _ wrap: (String) -> String, around start: String = "s") -> String {
        var expression = start
        for _ in 0..<levels { expression = wrap(expression) }
        return expression
    }

    @Test func nestedReplacesThatDoubleTheTextAreRefusedWithoutRunning() throws {
        // 24 levels would build 16 MB from one letter for each row.
        let query = try filter("length(\(nested(24) { "replace(\($0),'a','aa')" })) eq 1")
        do {
            _ = try QueryEvaluator().evaluate(query, over: [["id": "one", "s": "a"]])
            Issue.record("a replace that doubles 24 times should be refused")
        } catch {
            #expect(error.code == .tooLarge)
            #expect(error.option == "$filter")
            #expect(error.description.contains("nested replace or concat"))
        }
        // Four doublings (16 copies) are still a query.
        let four = try filter("length(\(nested(4) { "replace(\($0),'a','aa')" })) eq 16")
        let result = try QueryEvaluator().evaluate(four, over: [["id": "one", "s": "a"]])
        #expect(result.items.map(\.id) == ["one"])
    }

    @Test func aConcatTreeOfManyFieldsIsRefusedAndAFewFieldsAreNot() throws {
        func tree(_ leaves: Int) -> String {
            leaves == 1 ? "s" : "concat(\(tree(leaves / 2)),\(tree(leaves - leaves / 2)))"
        }
        #expect(throws: QueryError.self) { try QueryEvaluator().validate(try filter("length(\(tree(64))) gt 0")) }
        let fine = try filter("length(\(tree(16))) eq 16")
        #expect(try QueryEvaluator().evaluate(fine, over: [["id": "one", "s": "a"]]).items.count == 1)
        // Literals count by their bytes: concat of short literals and fields stays a query.
        let usual = try filter("concat(concat(s, ' - '), t) eq 'a - b'")
        #expect(try QueryEvaluator().evaluate(usual, over: [["id": "one", "s": "a", "t": "b"]]).items.count == 1)
    }

    @Test func replacementsThatDependOnFieldsAreBoundedByTheText() throws {
        // A literal text with a field as the replacement grows with the field, once per character.
        #expect(throws: Never.self) { try QueryEvaluator().validate(try filter("replace('abc', 'b', s) eq 'x'")) }
        // A field's text with a field as the replacement grows with the square of the data.
        #expect(throws: QueryError.self) { try QueryEvaluator().validate(try filter("replace(s, 'b', t) eq 'x'")) }
        // A pattern that is not a literal may be one character long: 'xyz' per character, so two
        // levels are 9 copies and three are 27.
        let growing = nested(2) { "replace(\($0), t, 'xyz')" }
        #expect(throws: Never.self) { try QueryEvaluator().validate(try filter("\(growing) eq 'x'")) }
        #expect(throws: QueryError.self) {
            try QueryEvaluator().validate(try filter("\(nested(3) { "replace(\($0), t, 'xyz')" }) eq 'x'"))
        }
        // An empty pattern replaces nothing, and shrinking replacements never add up.
        let shrinking = nested(40) { "replace(\($0), 'ab', 'a')" }
        #expect(throws: Never.self) { try QueryEvaluator().validate(try filter("\(shrinking) eq 'x'")) }
        #expect(throws: Never.self) {
            try QueryEvaluator().validate(try filter("\(nested(40) { "replace(\($0), '', 'abc')" }) eq 'x'"))
        }
    }

    @Test func ordersAreBoundedLikeFilters() throws {
        let order = try TableQuery(
            odata: "$orderby=\(nested(8) { "concat(\($0),\($0))" })", protocolVersion: .v3)
        do {
            try QueryEvaluator().validate(order)
            Issue.record("an order of 256 copies of a field should be refused")
        } catch {
            #expect(error.code == .tooLarge)
            #expect(error.option == "$orderby")
        }
    }
}
