public import Testing

/// What a conformance check runs against: a store or a storage under test, fresh for one check.
///
/// The framework closes it after every check, whether the check passed, failed or was skipped.
public protocol ConformanceFixture: Sendable {
    /// Why this fixture cannot run a check that needs `requirement`, or `nil` when it can.
    func unmet(_ requirement: ConformanceRequirement) -> String?

    /// Closes everything the fixture (and the check, through it) opened; never throws.
    func close() async
}

/// What a check needs from its fixture beyond the basics every fixture provides.
public struct ConformanceRequirement: Sendable, Hashable, CustomStringConvertible {
    /// The requirement, as a short phrase ("the persistent capability").
    public let description: String

    /// A requirement named by a short phrase.
    ///
    /// ```swift
    /// let reopening = ConformanceRequirement("reopening the same database")
    /// ```
    public init(_ description: String) {
        self.description = description
    }
}

/// One check of a conformance suite, named as a sentence, run against a fresh `Fixture`.
///
/// The client-store suite (``StoreConformance``) and the server-storage suite use this one type.
/// A target runs every check of a suite as the arguments of one parameterized test; the checks a
/// fixture cannot run are reported as cancelled with the reason, never passed silently:
///
/// ```swift
/// @Test(arguments: StoreConformanceSuite.all)
/// func conformance(_ check: StoreConformanceCheck) async throws {
///     try await check.run { StoreFixture(store: MemoryStore()) }
/// }
/// ```
public struct ConformanceCheck<Fixture: ConformanceFixture>: Sendable, CustomTestStringConvertible {
    /// The check, named as a sentence.
    public let name: String
    /// What the check needs from its fixture; a fixture that lacks one of them skips the check.
    public let requirements: [ConformanceRequirement]
    let body: @Sendable (Fixture) async throws -> Void

    public var testDescription: String { name }

    /// A check named `name` that needs `requirements` and runs `body`.
    ///
    /// ```swift
    /// let check = StoreConformanceCheck("an empty store has no tables") { fixture in
    ///     #expect(try await fixture.store.read { try $0.tableNames() } == [])
    /// }
    /// ```
    public init(
        _ name: String, requires requirements: [ConformanceRequirement] = [],
        body: @escaping @Sendable (Fixture) async throws -> Void
    ) {
        self.name = name
        self.requirements = requirements
        self.body = body
    }

    /// Why `fixture` cannot run this check, or `nil` when it can.
    public func unmet(by fixture: Fixture) -> String? {
        requirements.lazy.compactMap { fixture.unmet($0) }.first
    }

    /// Runs the check on a fresh fixture and closes the fixture afterwards, even when the check
    /// fails. A fixture that cannot run the check cancels the current test case with the reason.
    public func run(_ makeFixture: @Sendable () async throws -> Fixture) async throws {
        let fixture = try await makeFixture()
        if let reason = unmet(by: fixture) {
            await fixture.close()
            try Test.cancel("SKIPPED: \(reason)")
        }
        do {
            try await body(fixture)
        } catch {
            await fixture.close()
            throw error
        }
        await fixture.close()
    }
}

extension ConformanceCheck {
    /// The checks of `checks` that `fixture` cannot run, each with the reason; the fixture is
    /// closed afterwards.
    ///
    /// ```swift
    /// let skipped = await StoreConformanceCheck.skipped(StoreConformanceSuite.all, by: StoreFixture(store: MemoryStore()))
    /// ```
    public static func skipped(_ checks: [Self], by fixture: Fixture) async -> [(name: String, reason: String)] {
        let skipped = checks.compactMap { check in check.unmet(by: fixture).map { (check.name, $0) } }
        await fixture.close()
        return skipped
    }

    /// Cancels the current test with `skipped` (one line a skipped check, with its reason) when
    /// there are any, so that they show in `swift test`'s output, which does not list cancelled
    /// test cases; returns when there are none.
    ///
    /// ```swift
    /// try StoreConformanceCheck.report(skipped: ["\"a check\" (the reason)"])
    /// ```
    public static func report(skipped: [String]) throws {
        guard !skipped.isEmpty else { return }
        try Test.cancel("SKIPPED \(skipped.count) conformance checks: \(skipped.joined(separator: "; "))")
    }
}

/// An error with a stable code and one line for people: `StoreError`, and the server's
/// `StorageError` in the Apps package. ``expectError(_:_:_:sourceLocation:_:)`` checks either.
public protocol CodedError: Error {
    /// The kind of stable code the error carries.
    associatedtype Code: Equatable
    /// The stable code, for programs.
    var code: Code { get }
    /// The one line for people.
    var message: String { get }
}

/// Asserts that `body` throws an `E` with `code` and a message, and returns it.
///
/// ```swift
/// let error = await expectError(StoreError.self, .closed, "read after close") {
///     try await store.item("t", id: "1")
/// }
/// ```
@discardableResult
public func expectError<E: CodedError, T>(
    _ type: E.Type, _ code: E.Code, _ what: String, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> T
) async -> E? {
    do {
        _ = try await body()
        Issue.record("\(what): expected \(E.self).\(code), nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as E {
        #expect(error.code == code, "\(what): \(error)", sourceLocation: sourceLocation)
        #expect(!error.message.isEmpty, sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("\(what): expected \(E.self).\(code), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}
