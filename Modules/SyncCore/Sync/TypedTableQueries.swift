// The typed table's methods that take typed queries (TypedQuery, QueryPredicate): each builds its TableQuery
// first, so that a key path that names no field fails at the call with `invalidQuery`.

extension TypedSyncTable {
    /// Runs a typed query on the local models; see the `TableQuery` form.
    ///
    /// ```swift
    /// let open = try await todos.query(TypedQuery<Todo>().filter(\.done == false).orderBy(\.title))
    /// ```
    public func query(_ query: TypedQuery<Item>) async throws(SyncError) -> [Item] {
        try await self.query(try query.tableQuery())
    }

    /// The local models that satisfy `predicate`, sorted by `orderBy` when given.
    ///
    /// ```swift
    /// let open = try await todos.query(where: \.done == false, orderBy: \.title)
    /// ```
    public func query<Value: Equatable>(
        where predicate: QueryPredicate<Item>, orderBy: KeyPath<Item, Value>, descending: Bool = false
    ) async throws(SyncError) -> [Item] {
        try await query(TypedQuery(where: predicate).orderBy(orderBy, descending: descending))
    }

    /// The local models that satisfy `predicate`.
    ///
    /// ```swift
    /// let open = try await todos.query(where: \.done == false)
    /// ```
    public func query(where predicate: QueryPredicate<Item>) async throws(SyncError) -> [Item] {
        try await query(TypedQuery(where: predicate))
    }

    /// The models a typed query selects now, then after every commit that changes them; see
    /// the `TableQuery` form. A key path that names no field ends the sequence at once
    /// with ``SyncError/Code/invalidQuery``.
    ///
    /// ```swift
    /// for try await open in todos.observe(TypedQuery<Todo>(where: \.done == false)) {
    ///     print(open.map(\.title))
    /// }
    /// ```
    public func observe(_ query: TypedQuery<Item>, interval: Duration = .milliseconds(16))
        -> AsyncThrowingStream<[Item], any Error>
    {
        do {
            return observe(try query.tableQuery(), interval: interval)
        } catch {
            return AsyncThrowingStream { $0.finish(throwing: error) }
        }
    }

    /// Pulls the server's items that a typed query selects; see ``SyncTable/pull(_:queryID:options:)``.
    ///
    /// ```swift
    /// try await todos.pull(TypedQuery<Todo>(where: \.done == false), queryID: "open")
    /// ```
    @discardableResult
    public func pull(
        _ query: TypedQuery<Item>, queryID: String? = nil, options: PullOptions = PullOptions()
    ) async throws(SyncError) -> PullResult {
        try await pull(try query.serverQuery(), queryID: queryID, options: options)
    }

    /// Removes the local items a typed query selects; see ``SyncTable/purge(_:force:)``.
    @discardableResult
    public func purge(_ query: TypedQuery<Item>, force: Bool = false) async throws(SyncError) -> Int {
        try await purge(try query.tableQuery(), force: force)
    }
}
