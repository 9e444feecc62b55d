import Foundation
import SyncCore
import SyncTesting
import Testing

/// A model with a field of every kind typed queries compare, a renamed field, a nested value and a computed
/// property.
struct Errand: SyncModel, Equatable {
    static let tableName = "errand"

    enum Kind: String, Codable, Sendable, CaseIterable { case home, work }
    struct Details: Codable, Sendable, Equatable {
        var priority: Int
        var note: String?
    }

    var id: UUID = .unassigned
    var title: String
    var note: String?
    var done = false
    var count = 0
    var weight = 0.0
    var due: Date?
    var owner: UUID?
    var price: Decimal?
    var kind: Kind = .home
    var details: Details?
    /// Computed: not a field.
    var isBusy: Bool { count > 2 }
    /// Computed from one field: not a field either.
    var isOpen: Bool { !done }

    enum CodingKeys: String, CodingKey {
        case id, title, note, done, count, weight, owner, price, kind, details
        case due = "due_at"
    }
}

/// A model with a property computed from an array.
struct Basket: SyncModel {
    static let tableName = "basket"
    var id: String = .unassigned
    var fruits: [String]
    var count: Int { fruits.count }
    var label: String
    var labelLength: Int { label.count }
}

/// A model whose decoding refuses sample values.
struct Guarded: SyncModel {
    static let tableName = "guarded"
    var id: String = .unassigned
    var title: String

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        title = try container.decode(String.self, forKey: .title)
        guard title.count > 2 else {
            throw DecodingError.dataCorruptedError(forKey: .title, in: container, debugDescription: "too short")
        }
    }
}

/// A model with a ``Timestamp``, which the model encoder stores as ISO 8601 text as it does a `Date`.
struct Reading: SyncModel {
    static let tableName = "reading"
    var id: String = .unassigned
    var logged: Timestamp?
}

/// A model whose own coding stores its date as seconds since 1970 (as some backends do).
struct EpochReading: SyncModel {
    static let tableName = "epoch"
    var id: String = .unassigned
    var taken: Date

    enum CodingKeys: String, CodingKey { case id, taken }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        taken = Date(timeIntervalSince1970: try container.decode(Double.self, forKey: .taken))
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(taken.timeIntervalSince1970, forKey: .taken)
    }
}

private let base = Date(Timestamp(millisecondsSince1970: 1_700_000_000_000))
private func uuid(_ last: Int) -> UUID { UUID(uuidString: String(format: "00000000-0000-4000-8000-%012d", last))! }

/// One generated comparison: a typed predicate per operator, the string builder's expression, and the answer
/// Swift gives for a model (the three-way comparison of its value with the constant; `nil` when the value is null).
private struct Comparison: Sendable, CustomTestStringConvertible {
    let field: String
    let literal: QueryLiteral
    let typed: @Sendable (BinaryOperator) -> QueryPredicate<Errand>
    let untyped: @Sendable (BinaryOperator) -> QueryExpression
    let order: @Sendable (Errand) -> Int?
    let ordered: Bool

    var testDescription: String { field }

    init<Value: TypedQueryValue & QueryValueConvertible>(
        _ field: String, _ keyPath: any KeyPath<Errand, Value> & Sendable, _ value: Value, ordered: Bool = true,
        order: @escaping @Sendable (Errand) -> Int?
    ) {
        self.field = field
        self.literal = value.queryLiteral
        self.ordered = ordered
        self.order = order
        typed = { op in
            switch op {
            case .equal: keyPath == value
            case .notEqual: keyPath != value
            case .lessThan: keyPath < value
            case .lessThanOrEqual: keyPath <= value
            case .greaterThan: keyPath > value
            default: keyPath >= value
            }
        }
        untyped = { op in
            let field = QueryExpression.field(field)
            return switch op {
            case .equal: field.eq(value)
            case .notEqual: field.ne(value)
            case .lessThan: field.lt(value)
            case .lessThanOrEqual: field.le(value)
            case .greaterThan: field.gt(value)
            default: field.ge(value)
            }
        }
    }

    /// Whether a model with three-way result `order` satisfies `op` (null matches only `ne`).
    static func holds(_ op: BinaryOperator, _ order: Int?) -> Bool {
        guard let order else { return op == .notEqual }
        return switch op {
        case .equal: order == 0
        case .notEqual: order != 0
        case .lessThan: order < 0
        case .lessThanOrEqual: order <= 0
        case .greaterThan: order > 0
        default: order >= 0
        }
    }
}

private func threeWay<T: Comparable>(_ a: T?, _ b: T) -> Int? {
    guard let a else { return nil }
    return a < b ? -1 : a == b ? 0 : 1
}

private let comparisons: [Comparison] = [
    Comparison("title", \Errand.title, "b") { threeWay($0.title, "b") },
    Comparison("note", \Errand.note, "n2") { threeWay($0.note, "n2") },
    Comparison("done", \Errand.done, true, ordered: false) { $0.done == true ? 0 : 1 },
    Comparison("count", \Errand.count, 2) { threeWay($0.count, 2) },
    Comparison("weight", \Errand.weight, 1.5) { threeWay($0.weight, 1.5) },
    Comparison("due_at", \Errand.due, base.addingTimeInterval(60)) { threeWay($0.due, base.addingTimeInterval(60)) },
    Comparison("owner", \Errand.owner, uuid(2)) {
        threeWay($0.owner?.uuidString.lowercased(), uuid(2).uuidString.lowercased())
    },
    Comparison("price", \Errand.price, Decimal(string: "2.5")!) { threeWay($0.price, Decimal(string: "2.5")!) },
]

private let operators: [BinaryOperator] = [
    .equal, .notEqual, .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual,
]

/// Four errands that straddle every comparison's constant; the last has no optional values.
private let errands: [Errand] = (0..<4).map { index in
    let empty = index == 3
    return Errand(
        title: ["a", "b", "c", "d"][index], note: empty ? nil : "n\(index + 1)", done: index.isMultiple(of: 2),
        count: index + 1, weight: Double(index) * 0.75, due: empty ? nil : base.addingTimeInterval(Double(index) * 60),
        owner: empty ? nil : uuid(index + 1), price: empty ? nil : Decimal(index) + Decimal(string: "0.5")!,
        kind: index < 2 ? .home : .work, details: Errand.Details(priority: index, note: nil))
}

@Suite("Typed queries")
struct TypedQueryTests {
    @Test(arguments: comparisons)
    fileprivate func aComparisonBuildsTheStringBuildersQueryAndOData(_ comparison: Comparison) throws {
        for op in operators where comparison.ordered || op == .equal || op == .notEqual {
            let typed = try TypedQuery<Errand>().filter(comparison.typed(op)).orderBy(\.title, descending: true)
                .tableQuery()
            let untyped = TableQuery().filter(comparison.untyped(op)).orderBy("title", descending: true)
            #expect(typed == untyped)
            #expect(typed.filter == .binary(op, .field(comparison.field), .literal(comparison.literal)))
            for version in ProtocolVersion.allCases {
                #expect(
                    typed.odataQueryString(protocolVersion: version)
                        == untyped.odataQueryString(protocolVersion: version))
            }
        }
    }

    @Test func logicStringFunctionsSelectAndNilBuildTheSameQuery() throws {
        let typed = try TypedQuery<Errand>(
            where: !(\.done == true) && (.contains(\.title, "a") || .startsWith(\.note, "n") || .endsWith(\.title, "z"))
                && \.due == nil && \.kind == .work && \.kind != .home
        )
        .select(\.id, \.title, \.due).skip(1).top(2).tableQuery()
        let untyped = TableQuery()
            .filter(
                !QueryExpression.field("done").eq(true)
                    && (QueryExpression.field("title").contains("a") || QueryExpression.field("note").startsWith("n")
                        || QueryExpression.field("title").endsWith("z"))
                    && QueryExpression.field("due_at").eq(QueryLiteral.null)
                    && QueryExpression.field("kind").eq("work") && QueryExpression.field("kind").ne("home")
            )
            .select("id", "title", "due_at").skip(1).top(2)
        #expect(typed == untyped)
        #expect(typed.odataQueryString(protocolVersion: .v3) == untyped.odataQueryString(protocolVersion: .v3))
    }

    @Test(arguments: StoreKind.allCases)
    func localResultsMatchSwiftForEveryOperatorAndType(_ kind: StoreKind) async throws {
        let device = try Device(kind: kind, server: ModelServer())
        let table = device.context.table(Errand.self)
        var stored: [Errand] = []
        for errand in errands { stored.append(try await table.insert(errand)) }
        for comparison in comparisons {
            for op in operators where comparison.ordered || op == .equal || op == .notEqual {
                let found = try await table.query(where: comparison.typed(op), orderBy: \.title)
                let expected = stored.filter { Comparison.holds(op, comparison.order($0)) }
                #expect(found.map(\.title) == expected.map(\.title), "\(comparison.field) \(op.rawValue)")
            }
        }
        #expect(try await table.query(where: \.due == nil).map(\.title) == ["d"])
        #expect(try await table.query(where: \.owner != nil, orderBy: \.title).map(\.title) == ["a", "b", "c"])
        #expect(
            try await table.query(where: \.kind == .work, orderBy: \.title, descending: true).map(\.title) == [
                "d", "c",
            ])
        let some = try await table.query(
            where: .startsWith(\.note, "n") && !(\.done == true) || .endsWith(\.title, "c"), orderBy: \.title)
        #expect(some.map(\.title) == ["b", "c"])
        #expect(try await table.query(where: .contains(\.title, "d")) == [stored[3]])
        let page = try await table.query(TypedQuery<Errand>().orderBy(\.count, descending: true).skip(1).top(2))
        #expect(page.map(\.title) == ["c", "b"])
    }

    /// A `Date` and a `Timestamp` sort by instant (the text of other offsets sorts by the moment it
    /// names); other types by the field.
    @Test func datesAndTimestampsSortByInstant() async throws {
        #expect(
            try TypedQuery<Errand>().orderBy(\.due).orderBy(\.title).tableQuery().orderBy == [
                SortKey(.cast(.field("due_at"), .dateTimeOffset)), SortKey(.field("title")),
            ])
        #expect(
            try TypedQuery<Reading>().orderBy(\.logged, descending: true).tableQuery().orderBy == [
                SortKey(.cast(.field("logged"), .dateTimeOffset), descending: true)
            ])
        let device = try Device(kind: .sqliteMemory, server: ModelServer())
        try await device.context.store.upsert(
            "reading",
            [
                ["id": "a", "logged": "2026-03-01T09:00:00+02:00"], ["id": "b", "logged": "2026-03-01T08:00:00Z"],
                ["id": "c", "logged": "2026-03-01T07:30:00Z"],
            ])
        let readings = device.context.table(Reading.self)
        #expect(try await readings.query(TypedQuery().orderBy(\.logged)).map(\.id) == ["a", "c", "b"])
        // A date stored as a number by the model's own coding is refused, and said why (it was called
        // "computed").
        let epoch = #expect(throws: SyncError.self) { try TypedQuery<EpochReading>().orderBy(\.taken).tableQuery() }
        #expect(epoch?.code == .invalidQuery)
        #expect(
            epoch?.message
                == "a key path of EpochReading cannot be queried: the model decodes the date of 'taken' from a Double "
                + "(its own init(from:)), and typed queries compare dates as ISO 8601 text, as the model encoder "
                + "stores them; query 'taken' with the untyped builder")
    }

    @Test func anObservationRunsATypedQuery() async throws {
        let device = try Device(kind: .memory, server: ModelServer())
        let table = device.context.table(Errand.self)
        try await table.insert(Errand(title: "a", count: 1))
        var updates = table.observe(TypedQuery<Errand>(where: \.count >= 2).orderBy(\.title)).makeAsyncIterator()
        #expect(try await updates.next()?.map(\.title) == [])
        try await table.insert(Errand(title: "b", count: 3))
        #expect(try await updates.next()?.map(\.title) == ["b"])
    }

    @Test func aPullSendsTheTypedQueryToTheServer() async throws {
        let server = ModelServer()
        let writer = try Device("writer", kind: .memory, server: server)
        for errand in errands { try await writer.context.table(Errand.self).insert(errand) }
        try await writer.context.push()

        let device = try Device(kind: .sqliteMemory, server: server)
        let table = device.context.table(Errand.self)
        let query = TypedQuery<Errand>(where: \.due > base.addingTimeInterval(30) && \.owner != uuid(3))
        try await table.pull(query, queryID: "later")
        #expect(try await table.query(TypedQuery<Errand>().orderBy(\.title)).map(\.title) == ["b"])

        let filter = try #require(try query.tableQuery().filter).odata(protocolVersion: .v3)
        #expect(
            filter == "((due_at gt cast(2023-11-14T22:13:50.000Z,Edm.DateTimeOffset)) "
                + "and (owner ne cast(00000000-0000-4000-8000-000000000003,Edm.Guid)))")
        let received = try #require(server.requests.last { $0.kind == .query }?.query?.filter)
        #expect(received.odata(protocolVersion: .v3).contains(filter))
    }

    /// A date constant no query text carries (past the year 9999, or of NaN seconds): locally such a
    /// query matched every item (or none), and a pull of it was refused by the server after the call.
    @Test(arguments: StoreKind.allCases)
    func constantsNoQueryCarriesAreInvalidQueries(_ kind: StoreKind) async throws {
        let server = ModelServer()
        let device = try Device(kind: kind, server: server)
        let table = device.context.table(Errand.self)
        try await table.insert(Errand(title: "a", due: Date(timeIntervalSince1970: 1_700_000_000)))
        let queries: [(TypedQuery<Errand>, String)] = [
            (TypedQuery(where: \.due < Date(timeIntervalSince1970: 1e15)), "outside the years 0000-9999"),
            (TypedQuery(where: \.due < Date(timeIntervalSince1970: -1e15)), "outside the years 0000-9999"),
            (TypedQuery(where: \.due == Date(timeIntervalSince1970: .nan)), "outside the years 0000-9999"),
        ]
        for (query, words) in queries {
            let local = await expectSyncError(.invalidQuery) { _ = try await table.query(query) }
            #expect(local?.message.contains(words) == true, "\(local?.message ?? "")")
            let pull = await expectSyncError(.invalidQuery) { try await table.pull(query) }
            #expect(pull?.message.contains(words) == true, "\(pull?.message ?? "")")
        }
        #expect(server.requests.allSatisfy { $0.kind != .query }, "nothing was sent")
        let near = try await table.query(where: \.due < Date(timeIntervalSince1970: 253_402_300_799))
        #expect(near.map(\.title) == ["a"])
    }

    @Test func aComputedPropertyANestedValueAndAnUnprobeableModelAreInvalidQueries() async throws {
        let device = try Device(kind: .memory, server: ModelServer())
        let table = device.context.table(Errand.self)
        let computed = await expectSyncError(.invalidQuery) { _ = try await table.query(where: \.isBusy == true) }
        #expect(
            computed?.message.contains("a key path of Errand cannot be queried: it is not a stored property") == true)

        let derived = await expectSyncError(.invalidQuery) { _ = try await table.query(where: \.isOpen == true) }
        #expect(derived?.message.contains("it is computed from the field 'done'") == true)

        let nested = await expectSyncError(.invalidQuery) {
            _ = try await table.query(where: \.details?.priority == 1)
        }
        #expect(nested?.message.contains("'details/priority'") == true)
        #expect(nested?.message.contains("paths such as 'details/…' are not supported") == true)
        // The whole nested value is a field.
        #expect(try TypedQuery<Errand>().select(\.details).tableQuery().select == ["details"])

        // Computed from an array field: it was queried as the array ("fruits eq 2"), found nothing.
        let baskets = device.context.table(Basket.self)
        let counted = await expectSyncError(.invalidQuery) { _ = try await baskets.query(where: \.count == 2) }
        #expect(
            counted?.message.contains("it is computed from the field 'fruits'") == true,
            "\(String(describing: counted))")
        #expect(try TypedQuery<Basket>().select(\.fruits).tableQuery().select == ["fruits"])
        await expectSyncError(.invalidQuery) { _ = try await baskets.query(where: \.labelLength == 1) }
        #expect(try TypedQuery<Basket>(where: \.label == "x").tableQuery().filter == .field("label").eq("x"))

        await expectSyncError(.invalidQuery) { try await table.pull(TypedQuery(where: \.isBusy == false)) }
        await expectSyncError(.invalidQuery) {
            var observation = table.observe(TypedQuery(where: \.details?.note == nil)).makeAsyncIterator()
            _ = try await observation.next()
        }

        let guarded = device.context.table(Guarded.self)
        let unprobeable = await expectSyncError(.invalidQuery) { _ = try await guarded.query(where: \.title == "x") }
        #expect(
            unprobeable?.message
                == "Guarded cannot be used in a typed query: its init(from:) refused a sample value of the field "
                + "'title' (too short): it must accept any value of the field's type (an enum field must be "
                + "CaseIterable); or query it with TableQuery and field names")

        let uncased = device.context.table(Uncased.self)
        let notCaseIterable = await expectSyncError(.invalidQuery) {
            _ = try await uncased.query(where: \.title == "x")
        }
        #expect(
            notCaseIterable?.message
                == "Uncased cannot be used in a typed query: the field 'kind' is an enum that is not CaseIterable: "
                + "declare `enum Kind: CaseIterable` so that the fields can be told apart; or query it with "
                + "TableQuery and field names")
    }
}

/// A model with an enum that is not `CaseIterable`: its fields cannot be probed.
struct Uncased: SyncModel {
    static let tableName = "uncased"
    enum Kind: String, Codable, Sendable { case memo, list }
    var id: String = .unassigned
    var title: String
    var kind: Kind = .memo
}
