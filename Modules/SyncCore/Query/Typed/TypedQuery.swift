// A `TableQuery` built by key path: the builder of typed tables.

/// A query over the models of a typed table, built by key path and checked by the compiler.
///
/// It builds the ``TableQuery`` the string builder builds, so it runs the same way locally
/// (`TypedSyncTable.query(_:)`), in observations and as the server query of a pull; a `Date`
/// property sorts by instant (``orderBy(_:descending:)``):
///
/// ```swift
/// let query = TypedQuery<Todo>()
///     .filter(\.done == false)
///     .orderBy(\.due, descending: true)
///     .top(20)
/// // the same as
/// let same = TableQuery()
///     .filter(QueryExpression.field("done").eq(false))
///     .orderBy(.cast(.field("due"), .dateTimeOffset), descending: true)
///     .top(20)
/// assert(try query.tableQuery() == same)
/// ```
///
/// Field names come from the model's coding keys (a property with the coding key `due_date` filters
/// `due_date`). A key path must be a stored, `Codable` property at the top level of the model, of an
/// `Equatable` type: a computed property, a property of a nested value (`\.details.priority`, which the
/// protocol cannot query), or a model whose `init(from:)` refuses sample values makes ``tableQuery()``,
/// and the table methods that run the query, throw ``SyncError/Code/invalidQuery``. Enum properties must
/// be `CaseIterable`.
public struct TypedQuery<Model: Codable & Sendable>: Sendable {
    private var query = TableQuery()
    /// The first key path that named no field.
    private var error: SyncError?

    /// A query of every model.
    public init() {}

    /// A query of the models that satisfy `predicate`.
    ///
    /// ```swift
    /// let open = TypedQuery<Todo>(where: \.done == false)
    /// ```
    public init(where predicate: QueryPredicate<Model>) {
        self = filter(predicate)
    }

    /// The query as an untyped ``TableQuery``; throws ``SyncError/Code/invalidQuery`` when a key path names
    /// no field.
    public func tableQuery() throws(SyncError) -> TableQuery {
        if let error { throw error }
        return query
    }

    private func with(_ change: (inout TableQuery) throws(SyncError) -> Void) -> Self {
        var copy = self
        guard copy.error == nil else { return copy }
        do throws(SyncError) {
            try change(&copy.query)
        } catch {
            copy.error = error
        }
        return copy
    }

    /// A copy filtered by `predicate`, ANDed with any filter the query already has.
    ///
    /// ```swift
    /// let query = TypedQuery<Todo>().filter(\.done == false).filter(.startsWith(\.title, "Buy"))
    /// ```
    public func filter(_ predicate: QueryPredicate<Model>) -> Self {
        with { query throws(SyncError) in query = query.filter(try predicate.expression()) }
    }

    /// A copy that also sorts by the field `keyPath` names, after the existing sort keys.
    ///
    /// A `Date` (or ``Timestamp``) property sorts by instant, `cast(due, Edm.DateTimeOffset)`: ISO 8601
    /// text that another client wrote with another offset (`2026-03-01T09:00:00+02:00`) sorts by the
    /// moment it names, as filters compare it, not by its characters; text that is no date sorts with
    /// `nil`, first ascending. A pull's server query sorts by the field itself
    /// (``serverQuery()``), which every server of the protocol takes.
    ///
    /// ```swift
    /// let query = TypedQuery<Todo>().orderBy(\.done).orderBy(\.due, descending: true)
    /// ```
    public func orderBy<Value: Equatable>(_ keyPath: KeyPath<Model, Value>, descending: Bool = false) -> Self {
        with { query throws(SyncError) in
            let field = QueryExpression.field(try FieldProbes.field(keyPath))
            let isInstant = ProbeDecoder.isDate(Value.self)
            query.orderBy.append(SortKey(isInstant ? .cast(field, .dateTimeOffset) : field, descending: descending))
        }
    }

    /// The query a pull sends: ``tableQuery()`` with each instant sort key of a `Date` property
    /// (`cast(due, Edm.DateTimeOffset)`) as the bare field, the form every server of the protocol
    /// sorts by (a server of version 2.0 does not parse the cast).
    ///
    /// ```swift
    /// let sent = try TypedQuery<Todo>().orderBy(\.due).serverQuery()  // $orderby=due
    /// ```
    public func serverQuery() throws(SyncError) -> TableQuery {
        var query = try tableQuery()
        for index in query.orderBy.indices {
            if case .cast(let field, .dateTimeOffset) = query.orderBy[index].expression, case .field = field {
                query.orderBy[index].expression = field
            }
        }
        return query
    }

    /// A copy that returns only the fields the key paths name (a model whose other fields are required
    /// then does not decode; see `TypedSyncTable.query(_:)`).
    ///
    /// ```swift
    /// let query = TypedQuery<Todo>().select(\.id, \.title, \.done)
    /// ```
    public func select<each Value: Equatable>(_ keyPaths: repeat KeyPath<Model, each Value>) -> Self {
        var fields: [String] = []
        do throws(SyncError) {
            for keyPath in repeat each keyPaths { fields.append(try FieldProbes.field(keyPath)) }
        } catch {
            var copy = self
            copy.error = copy.error ?? error
            return copy
        }
        return with { $0 = $0.select(fields) }
    }

    /// A copy that skips the first `count` matching models.
    public func skip(_ count: Int) -> Self { with { $0 = $0.skip(count) } }

    /// A copy that returns at most `count` models.
    public func top(_ count: Int) -> Self { with { $0 = $0.top(count) } }

    /// A copy that includes soft-deleted items.
    public func includingDeleted() -> Self { with { $0 = $0.includingDeleted() } }
}
