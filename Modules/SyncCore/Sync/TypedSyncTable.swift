/// A table of `Codable` models on top of a ``SyncTable``.
///
/// Models encode to JSON objects field by field, in the forms the table protocol and the other
/// clients use:
///
/// | Swift | JSON |
/// |---|---|
/// | `Int`, `Int64`, … | an integer (a `UInt64` beyond `Int64` is refused) |
/// | `Double`, `Float` | a number (NaN and infinity are refused) |
/// | `Date` | `"2023-11-14T22:13:20.123Z"`: UTC, milliseconds (truncated), as `updatedAt` |
/// | ``Timestamp`` | the same |
/// | `UUID` | `"0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d"`: lowercase (either case is read) |
/// | `URL` | its absolute string |
/// | `Data` | base64 |
/// | `Decimal` | a number that reads back exactly (up to 15 significant digits; more is refused) |
/// | an enum with raw values | its raw value |
/// | a nested `Codable` struct, an array, a dictionary | an object, an array, an object |
/// | `nil` | `null` (a missing field and `null` both read as `nil`) |
///
/// Reading a `Date` also accepts offsets (`+01:00`), no fraction or a longer one, and the number
/// typed tables wrote before they knew dates (seconds since 2001); not milliseconds since 1970.
///
/// A model whose `id` is `nil`, missing or empty gets a generated id on insert.
///
/// ```swift
/// struct Todo: Codable, Sendable {
///     var id: String?
///     var title: String
///     var done = false
/// }
/// let todos = context.table("todo", of: Todo.self)
/// let milk = try await todos.insert(Todo(title: "Milk"))
/// let open = try await todos.query(TableQuery().filter(.field("done").eq(false)))
/// ```
public struct TypedSyncTable<Item: Codable & Sendable>: Sendable {
    /// The untyped table underneath.
    public let table: SyncTable

    init(table: SyncTable) { self.table = table }

    /// The table's name.
    public var name: String { table.name }

    /// Inserts a model and queues its insert; returns it as stored (with its id).
    @discardableResult
    public func insert(_ item: Item) async throws(SyncError) -> Item {
        var object = try encode(item)
        if object["id"]?.stringValue?.isEmpty == true { object.removeValue(forKey: "id") }
        return try decode(try await table.insert(object))
    }

    /// Replaces a stored model and queues an update; returns it as stored.
    @discardableResult
    public func update(_ item: Item) async throws(SyncError) -> Item {
        try decode(try await table.update(try encode(item)))
    }

    /// Deletes a model and queues a delete.
    public func delete(_ item: Item) async throws(SyncError) {
        try await table.delete(try encode(item))
    }

    /// Deletes the model with `id` and queues a delete.
    public func delete(id: String) async throws(SyncError) {
        try await table.delete(id: id)
    }

    /// The local model with `id`, or `nil`.
    public func item(id: String) async throws(SyncError) -> Item? {
        try await table.item(id: id).map(decode)
    }

    /// Runs a query on the local models.
    public func query(_ query: TableQuery = TableQuery()) async throws(SyncError) -> [Item] {
        try await table.query(query).items.map(decode)
    }

    /// The models a query selects now, then again after every commit that changes them; see
    /// ``SyncTable/observe(_:interval:)``.
    ///
    /// ```swift
    /// for try await open in todos.observe(TableQuery().filter(.field("done").eq(false))) {
    ///     print(open.map(\.title))
    /// }
    /// ```
    public func observe(_ query: TableQuery = TableQuery(), interval: Duration = .milliseconds(16))
        -> AsyncThrowingStream<[Item], any Error>
    {
        let objects = table.observe(query, interval: interval)
        let table = self
        return AsyncThrowingStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
            let runner = Task {
                do {
                    for try await items in objects { continuation.yield(try items.map(table.decode)) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in runner.cancel() }
        }
    }

    /// Pulls the server's items; see ``SyncTable/pull(_:queryID:options:)``.
    @discardableResult
    public func pull(
        _ query: TableQuery = TableQuery(), queryID: String? = nil, options: PullOptions = PullOptions()
    ) async throws(SyncError) -> PullResult {
        try await table.pull(query, queryID: queryID, options: options)
    }

    /// Removes local items; see ``SyncTable/purge(_:force:)``.
    @discardableResult
    public func purge(_ query: TableQuery = TableQuery(), force: Bool = false) async throws(SyncError) -> Int {
        try await table.purge(query, force: force)
    }

    private func encode(_ item: Item) throws(SyncError) -> JSONObject {
        let value: JSONValue
        do {
            value = try JSONValueEncoder().encode(item)
        } catch {
            throw SyncError(
                .invalidItem, "table '\(name)': a \(Item.self) does not encode: \(error)",
                underlying: SendableDescription(String(describing: error)))
        }
        guard case .object(let object) = value else {
            throw SyncError(.invalidItem, "table '\(name)': a \(Item.self) must encode as a JSON object")
        }
        return object
    }

    func decode(_ object: JSONObject) throws(SyncError) -> Item {
        do {
            return try JSONValueDecoder().decode(Item.self, from: .object(object))
        } catch {
            throw SyncError(
                .invalidItem, "table '\(name)': item '\(object.id ?? "?")' does not decode as \(Item.self): \(error)",
                underlying: SendableDescription(String(describing: error)))
        }
    }
}
