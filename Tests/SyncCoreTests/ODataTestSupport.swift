import StoreConformance
import Testing

@testable import SyncCore

/// Helpers for the OData suites; a suite adopts the protocol to call them unqualified without adding global names
/// to the test module.
protocol ODataTestSupport {}

extension ODataTestSupport {

    /// Shorthands for expected trees.
    func field(_ name: String) -> QueryExpression { .field(name) }
    func int(_ value: Int64) -> QueryExpression { .literal(.int(value)) }
    func double(_ value: Double) -> QueryExpression { .literal(.double(value)) }
    func decimal(_ value: Double) -> QueryExpression { .literal(.decimal(value)) }
    func string(_ value: String) -> QueryExpression { .literal(.string(value)) }
    func bool(_ value: Bool) -> QueryExpression { .literal(.bool(value)) }
    var null: QueryExpression { .literal(.null) }
    func binary(_ op: BinaryOperator, _ lhs: QueryExpression, _ rhs: QueryExpression) -> QueryExpression {
        .binary(op, lhs, rhs)
    }
    func call(_ function: QueryFunction, _ arguments: QueryExpression...) -> QueryExpression {
        .function(function, arguments)
    }
    func date(_ text: String) -> QueryExpression { .literal(.date(CalendarDate(iso8601: text)!)) }
    func instant(_ text: String) -> QueryExpression { .literal(.dateTimeOffset(Timestamp(iso8601: text)!)) }
    func time(_ text: String) -> QueryExpression { .literal(.timeOfDay(TimeOfDay(iso8601: text)!)) }

    /// Parses a `$filter` value.
    func parseFilter(_ text: String, _ protocolVersion: ProtocolVersion = .v3, limits: QueryLimits = .default)
        throws(QueryError)
        -> QueryExpression
    {
        try QueryExpression(odataFilter: text, protocolVersion: protocolVersion, limits: limits)
    }

    /// The error `body` throws, or `nil`.
    func queryError(_ body: () throws -> Void) -> QueryError? {
        do {
            try body()
            return nil
        } catch let error as QueryError {
            return error
        } catch {
            Issue.record("expected a QueryError, got \(error)")
            return nil
        }
    }

    /// Expects `body` to throw a ``QueryError`` with `code`, and, when given, `position` and `option`.
    func expectQueryError(
        _ code: QueryError.Code,
        at position: Int? = nil,
        option: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () throws -> Void
    ) {
        guard let error = queryError(body) else {
            Issue.record("expected a \(code) error, but it succeeded", sourceLocation: sourceLocation)
            return
        }
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        if let position { #expect(error.position == position, "\(error)", sourceLocation: sourceLocation) }
        if let option { #expect(error.option == option, "\(error)", sourceLocation: sourceLocation) }
    }

    /// Expects the filter `text` to fail with `code` at `position` in both protocol versions.
    func expectFilterError(
        _ text: String,
        _ code: QueryError.Code,
        at position: Int?,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        for protocolVersion in ProtocolVersion.allCases {
            expectQueryError(code, at: position, option: "$filter", sourceLocation: sourceLocation) {
                _ = try parseFilter(text, protocolVersion)
            }
        }
    }

    /// Expects the filter `text` to parse to `expected` in both protocol versions.
    func expectFilter(
        _ text: String,
        _ expected: QueryExpression,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        for protocolVersion in ProtocolVersion.allCases {
            do {
                let parsed = try parseFilter(text, protocolVersion)
                #expect(parsed == expected, "\(protocolVersion.rawValue): \(text)", sourceLocation: sourceLocation)
            } catch {
                Issue.record("\(protocolVersion.rawValue): \(text) failed: \(error)", sourceLocation: sourceLocation)
            }
        }
    }

    /// The value `body` returns, or `nil` when it throws a ``QueryError`` (any other outcome is impossible: the
    /// error type is typed).
    func queryErrorOrValue<T>(_ body: () throws(QueryError) -> T) -> T? {
        do {
            return try body()
        } catch {
            #expect(!error.reason.isEmpty)
            return nil
        }
    }
}
