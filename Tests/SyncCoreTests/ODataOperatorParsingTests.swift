import StoreConformance
import Testing

@testable import SyncCore

@Suite("OData $filter operators")
struct ODataOperatorParsingTests: ODataTestSupport {
    @Test("comparison operators", arguments: BinaryOperator.allCases.filter(\.isComparison))
    func comparisons(op: BinaryOperator) {
        expectFilter("year \(op.rawValue) 1994", binary(op, field("year"), int(1994)))
        expectFilter("(year \(op.rawValue) 1994)", binary(op, field("year"), int(1994)))
        expectFilter("  year   \(op.rawValue)\t1994  ", binary(op, field("year"), int(1994)))
    }

    @Test("arithmetic operators", arguments: BinaryOperator.allCases.filter(\.isArithmetic))
    func arithmetic(op: BinaryOperator) {
        expectFilter(
            "(price \(op.rawValue) 2) gt 30",
            binary(.greaterThan, binary(op, field("price"), int(2)), int(30))
        )
    }

    @Test func logicalOperators() {
        expectFilter(
            "year ge 1930 and year le 1940",
            binary(
                .and,
                binary(.greaterThanOrEqual, field("year"), int(1930)),
                binary(.lessThanOrEqual, field("year"), int(1940))
            )
        )
        expectFilter("a or b", binary(.or, field("a"), field("b")))
        expectFilter("not a", .unary(.not, field("a")))
        expectFilter("not(booleanValue)", .unary(.not, field("booleanValue")))
        expectFilter("not (price gt 10)", .unary(.not, binary(.greaterThan, field("price"), int(10))))
    }

    @Test func precedence() {
        // or < and
        expectFilter("a or b and c", binary(.or, field("a"), binary(.and, field("b"), field("c"))))
        expectFilter("a and b or c", binary(.or, binary(.and, field("a"), field("b")), field("c")))
        // and < eq
        expectFilter(
            "a eq 1 and b ne 2",
            binary(.and, binary(.equal, field("a"), int(1)), binary(.notEqual, field("b"), int(2)))
        )
        // eq < gt
        expectFilter("a eq b gt c", binary(.equal, field("a"), binary(.greaterThan, field("b"), field("c"))))
        expectFilter("a gt b eq c", binary(.equal, binary(.greaterThan, field("a"), field("b")), field("c")))
        // gt < add < mul
        expectFilter(
            "a add b mul c gt d",
            binary(.greaterThan, binary(.add, field("a"), binary(.multiply, field("b"), field("c"))), field("d"))
        )
        expectFilter(
            "a mul b add c eq d",
            binary(.equal, binary(.add, binary(.multiply, field("a"), field("b")), field("c")), field("d"))
        )
        // unary binds tightest
        expectFilter("not a eq true", binary(.equal, .unary(.not, field("a")), bool(true)))
        expectFilter("-a add 1 eq 0", binary(.equal, binary(.add, .unary(.negate, field("a")), int(1)), int(0)))
        // in sits with gt ge lt le, above eq and below add
        expectFilter(
            "a eq b in (1, 2)",
            binary(.equal, field("a"), .isIn(field("b"), [int(1), int(2)]))
        )
        expectFilter("a add 1 in (2)", .isIn(binary(.add, field("a"), int(1)), [int(2)]))
        expectFilter(
            "x in ('a') or y in ('b')",
            binary(.or, .isIn(field("x"), [string("a")]), .isIn(field("y"), [string("b")]))
        )
        // the peers' unparenthesized forms
        expectFilter(
            "(year ge 1930 and year le 1940) or (year ge 1950 and year le 1960)",
            binary(
                .or,
                binary(
                    .and,
                    binary(.greaterThanOrEqual, field("year"), int(1930)),
                    binary(.lessThanOrEqual, field("year"), int(1940))
                ),
                binary(
                    .and,
                    binary(.greaterThanOrEqual, field("year"), int(1950)),
                    binary(.lessThanOrEqual, field("year"), int(1960))
                )
            )
        )
        expectFilter(
            "bestPictureWinner eq true and ceiling(duration div 60.0) eq 2",
            binary(
                .and,
                binary(.equal, field("bestPictureWinner"), bool(true)),
                binary(.equal, call(.ceiling, binary(.divide, field("duration"), double(60))), int(2))
            )
        )
    }

    @Test func leftAssociativity() {
        expectFilter(
            "a sub b sub c eq 0",
            binary(.equal, binary(.subtract, binary(.subtract, field("a"), field("b")), field("c")), int(0))
        )
        expectFilter(
            "a div b mod c eq 0",
            binary(.equal, binary(.modulo, binary(.divide, field("a"), field("b")), field("c")), int(0))
        )
        expectFilter("a or b or c", binary(.or, binary(.or, field("a"), field("b")), field("c")))
    }

    @Test func parenthesesOverridePrecedence() {
        expectFilter("(a or b) and c", binary(.and, binary(.or, field("a"), field("b")), field("c")))
        expectFilter("((((a))))", field("a"))
        expectFilter(
            "a mul (b add c) eq d",
            binary(.equal, binary(.multiply, field("a"), binary(.add, field("b"), field("c"))), field("d"))
        )
    }

    @Test func unaryMinus() {
        expectFilter("price eq -8", binary(.equal, field("price"), int(-8)))
        expectFilter("price eq - 8", binary(.equal, field("price"), int(-8)))
        expectFilter("price eq -(8)", binary(.equal, field("price"), int(-8)))
        expectFilter("price eq - -8", binary(.equal, field("price"), int(8)))
        expectFilter("price eq -0.5", binary(.equal, field("price"), double(-0.5)))
        expectFilter("price eq -2.0M", binary(.equal, field("price"), decimal(-2)))
        expectFilter("price eq -9223372036854775808", binary(.equal, field("price"), int(.min)))
        expectFilter("-price gt 1", binary(.greaterThan, .unary(.negate, field("price")), int(1)))
        expectFilter(
            "-(price add 1) gt 1",
            binary(.greaterThan, .unary(.negate, binary(.add, field("price"), int(1))), int(1))
        )
        expectFilter(
            "x eq -(-9223372036854775808)",
            binary(.equal, field("x"), .unary(.negate, int(.min)))
        )
        expectFilter("x eq -INF", binary(.equal, field("x"), double(-.infinity)))
    }

    @Test("'-' is not a binary operator")
    func minusIsNotBinary() {
        expectFilterError("(year - 1900) ge 100", .syntax, at: 6)
        expectFilterError("year - 1900 ge 100", .syntax, at: 5)
        expectFilterError("(year -1900) ge 100", .syntax, at: 6)
        expectFilterError("year sub 1900 - 1 ge 100", .syntax, at: 14)
    }

    @Test func inOperator() {
        expectFilter("x in (1, 2, 3)", .isIn(field("x"), [int(1), int(2), int(3)]))
        expectFilter("id in ( 'IT', 'GR', 'EG' )", .isIn(field("id"), [string("IT"), string("GR"), string("EG")]))
        expectFilter("stringValue in ('A','B')", .isIn(field("stringValue"), [string("A"), string("B")]))
        expectFilter("x in ('a')", .isIn(field("x"), [string("a")]))
        expectFilter(
            "tolower(x) in (tolower(y), 'b')",
            .isIn(call(.toLower, field("x")), [call(.toLower, field("y")), string("b")])
        )
        expectFilterError("x in ()", .syntax, at: 6)
        expectFilterError("x in 'a'", .syntax, at: 5)
        expectFilterError("x in ('a' 'b')", .syntax, at: 10)
        expectFilterError("x in ('a',", .syntax, at: 10)
        expectFilterError("1 in ('a')", .typeMismatch, at: 6)
    }
}
