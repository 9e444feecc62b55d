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
/// A model whose `id` is `nil`, missing or empty (or ``SyncModelID/unassigned`` for a
/// ``SyncModel``) gets a generated id on insert. A stored item that does not decode as the model
/// (another client left a field out, say) is skipped by ``query(_:)-(TableQuery)`` and
/// ``observe(_:interval:)-(TableQuery,_)`` and reported by the context (``SyncContext/undecodableItems``), or throws with
/// ``DecodingPolicy/strict``; see ``DecodingPolicy``.
///
/// ```swift
/// struct Todo: SyncModel {
///     static let tableName = "todo"
///     var id: String = .unassigned
///     var title: String
///     var due: Date?
///     var done = false
/// }
/// let todos = context.table(Todo.self)            // or context.table("todo", of: Todo.self)
/// let milk = try await todos.insert(Todo(title: "Milk", due: .now))
/// let open = try await todos.query(TypedQuery<Todo>(where: \.done == false))
/// ```
///
/// Every method throws only ``SyncError``.
public struct TypedSyncTable<Item: Codable & Sendable>: Sendable {
    /// The untyped table underneath.
    public let table: SyncTable
    /// What a read does with a stored item that does not decode as `Item`.
    public let decodingPolicy: DecodingPolicy

    init(table: SyncTable, decodingPolicy: DecodingPolicy) {
        self.table = table
        self.decodingPolicy = decodingPolicy
    }

    /// The table's name.
    public var name: String { table.name }

    /// Inserts a model and queues its insert; returns it as stored (with its id). An id that is
    /// `nil`, empty or ``SyncModelID/unassigned`` is generated (``ItemID/generate()``: a UUIDv7).
    @discardableResult
    public func insert(_ item: Item) async throws(SyncError) -> Item {
        var object = try encode(item)
        let unassigned =
            (item as? any SyncModel)?.hasUnassignedID == true || object["id"] == .null
            || object["id"]?.stringValue?.isEmpty == true
        if unassigned { object.removeValue(forKey: "id") }
        try checkSystemProperties(object)
        return try decode(try await table.insert(object))
    }

    /// A model with a field named like a system property the server sets (`version`, `createdAt`,
    /// `updatedAt`, `deleted`) that does not decode without it (`var version: Int`: the store keeps
    /// the server's, a string, never the app's) was written, then failed to decode: every retry
    /// inserted another item. Refused before the write.
    private func checkSystemProperties(_ object: JSONObject) throws(SyncError) {
        let owned = object.keys.filter(ItemFields.isServerOwned).sorted()
        guard !owned.isEmpty else { return }
        var stored = ItemFields.body(object)
        if stored["id"] == nil { stored["id"] = .string(ItemID.generate()) }
        do {
            _ = try JSONValueDecoder().decode(Item.self, from: .object(stored))
        } catch {
            let fields = owned.map { "'\($0)'" }.joined(separator: ", ")
            throw SyncError(
                .invalidItem,
                "table '\(name)': \(modelName) has \(fields), set by the server (the store keeps the server's, not"
                    + " the app's), and does not decode without it: make it optional (the server's version is a"
                    + " string, its times dates) or rename it",
                underlying: SendableDescription(String(describing: error)))
        }
    }

    /// Writes a model's fields over the stored item and queues an update; returns it as stored. A
    /// model whose id is ``SyncModelID/unassigned`` was never inserted: ``SyncError/Code/invalidItem``.
    ///
    /// Only what the model says changes. Fields of the stored item that the model does not have stay
    /// (another version of the app, or another client, wrote them), and a field whose value the
    /// model leaves as it read it keeps the form it is stored in: a decimal another client stored as
    /// the string `"19.99"` stays a string (the server may hold that field as text and refuse a
    /// number), a date written with an offset keeps it. A field the model changes is written as the
    /// model encodes it.
    @discardableResult
    public func update(_ item: Item) async throws(SyncError) -> Item {
        try requireAssignedID(item, "update")
        let given = try encode(item)
        return try decode(try await table.update(given) { stored in Self.written(given, over: stored) })
    }

    /// What an update of `given` writes over `stored` (``update(_:)``): `stored`, with the fields
    /// whose value differs from what `stored` reads as written as `given` has them, and the fields
    /// the model reads that `given` lacks set to `null`. A stored item the model cannot read takes
    /// every field of `given`.
    ///
    /// One stored form is not kept: a number the model reads as a string (a `Date` that typed tables
    /// wrote as seconds since 2001 before they wrote ISO 8601) is rewritten in the model's form.
    static func written(_ given: JSONObject, over stored: JSONObject?) -> JSONObject {
        guard let stored else { return given }
        // The stored item as the model reads it, written back: a field equal in it was not changed.
        let read: JSONObject? = (try? JSONValueDecoder().decode(Item.self, from: .object(stored))).flatMap {
            try? JSONValueEncoder().encode($0).objectValue
        }
        var written = stored
        for (field, value) in given {
            if read?[field] == value, let kept = stored[field], !Self.isLegacyDate(kept, value) { continue }
            written[field] = value
        }
        if let read { for field in read.keys where given[field] == nil { written[field] = .null } }
        return written
    }

    /// Deletes a model and queues a delete. A model whose id is ``SyncModelID/unassigned`` was
    /// never inserted: ``SyncError/Code/invalidItem``.
    public func delete(_ item: Item) async throws(SyncError) {
        try requireAssignedID(item, "delete")
        try await table.delete(try encode(item))
    }

    /// An update or delete of a model never inserted would write to the one id every such model
    /// shares (the zero UUID): refused.
    private func requireAssignedID(_ item: Item, _ action: String) throws(SyncError) {
        guard (item as? any SyncModel)?.hasUnassignedID == true else { return }
        throw SyncError(
            .invalidItem,
            "table '\(name)': cannot \(action) \(aModel) whose id is unassigned: insert it first (the insert gives it an id)"
        )
    }

    /// Deletes the model with `id` and queues a delete.
    public func delete(id: String) async throws(SyncError) {
        try await table.delete(id: id)
    }

    /// The local model with `id`, or `nil`.
    ///
    /// A stored item that does not decode as `Item` throws ``SyncError/Code/invalidItem`` (whose
    /// ``SyncError/underlying`` is the ``UndecodableItem``), whatever the ``decodingPolicy``: `nil`
    /// would say that no item has this id, and an insert with it would then fail.
    ///
    /// ```swift
    /// if let milk = try await todos.item(id: "milk") { print(milk.title) }
    /// ```
    public func item(id: String) async throws(SyncError) -> Item? {
        guard let object = try await table.item(id: id) else {
            context.undecodable.clear(table: name, model: modelName, ids: [id])
            return nil
        }
        return try decode(object)
    }

    /// Runs a query on the local models.
    ///
    /// Stored items that do not decode as `Item` are left out and reported
    /// (``SyncContext/undecodableItems``), or throw with ``DecodingPolicy/strict``. They count
    /// toward the query's `top`, so a page can hold fewer models; and a `select` that leaves out a
    /// field the model requires makes every item one of them.
    ///
    /// ```swift
    /// let open = try await todos.query(TableQuery().filter(.field("done").eq(false)).orderBy("title"))
    /// ```
    public func query(_ query: TableQuery = TableQuery()) async throws(SyncError) -> [Item] {
        let objects = try await table.query(query).items
        await forgetReportsOfGoneItems(besides: objects)
        return try decode(objects)
    }

    /// The models a query selects now, then again after every commit that changes them; see
    /// ``SyncTable/observe(_:interval:)``.
    ///
    /// Stored items that do not decode as `Item` are left out and reported
    /// (``SyncContext/undecodableItems``): the observation keeps running. With
    /// ``DecodingPolicy/strict`` the first such item ends it with ``SyncError/Code/invalidItem``.
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
                    // Only models that differ from the last: a change to a row that does not
                    // decode (and is skipped) leaves them as they were, and so does a change of a
                    // field the model does not hold (the version and times a push brought). The
                    // models are compared as they encode (`Item` need not be Equatable).
                    var last: [JSONObject]?
                    for try await items in objects {
                        await table.forgetReportsOfGoneItems(besides: items)
                        let decoded = try table.decode(items)
                        let compared = decoded.map { (try? table.encode($0)) ?? [:] }
                        if compared == last { continue }
                        last = compared
                        continuation.yield(decoded)
                    }
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

    private var context: SyncContext { table.context }
    /// The model's name in reports.
    private var modelName: String { String(describing: Item.self) }
    /// The model's name after "a" or "an" ("an Event"; a leading U is taken as "you": "a User").
    private var aModel: String { ("AEIO".contains(modelName.first ?? "x") ? "an " : "a ") + modelName }

    private func encode(_ item: Item) throws(SyncError) -> JSONObject {
        let value: JSONValue
        do {
            value = try JSONValueEncoder().encode(item)
        } catch {
            // Not `String(describing:)` of an EncodingError: it describes the value, and describing a
            // `Date` of NaN seconds stops the process (FoundationEssentials).
            let why: String
            if case EncodingError.invalidValue(_, let context) = error {
                why =
                    "\(context.codingPath.isEmpty ? "" : "'\(codingPathText(context.codingPath))': ")"
                    + context.debugDescription
            } else {
                why = String(describing: error)
            }
            throw SyncError(
                .invalidItem, "table '\(name)': \(aModel) does not encode: \(why)",
                underlying: SendableDescription(why))
        }
        guard case .object(let object) = value else {
            throw SyncError(.invalidItem, "table '\(name)': \(aModel) must encode as a JSON object")
        }
        return object
    }

    /// The model of one stored item, or the report of why it does not fit.
    private func model(of object: JSONObject) throws(UndecodableItem) -> Item {
        let item: Item
        do {
            item = try JSONValueDecoder().decode(Item.self, from: .object(object))
        } catch {
            throw UndecodableItem(error, object: object, table: name, model: modelName)
        }
        // An id read leniently (a UUID in uppercase) would be written back as another id.
        if let stored = object.id, let written = (item as? any SyncModel)?.storedID, written != stored {
            throw UndecodableItem(
                table: name, itemID: stored, model: modelName, field: "id",
                reason: "it would be written back as '\(written)', another id: give \(modelName) a String id")
        }
        return item
    }

    /// Whether `stored` is a number that the model writes as the string `written`.
    private static func isLegacyDate(_ stored: JSONValue, _ written: JSONValue) -> Bool {
        switch (stored, written) {
        case (.int, .string), (.double, .string): true
        default: false
        }
    }

    /// Decodes one stored item; one that does not fit is reported and throws, whatever the policy.
    func decode(_ object: JSONObject) throws(SyncError) -> Item {
        do {
            let item = try model(of: object)
            if let id = object.id { context.undecodable.clear(table: name, model: modelName, ids: [id]) }
            return item
        } catch {
            context.undecodable.report(error)
            throw SyncError(.invalidItem, error.description, underlying: error)
        }
    }

    /// Forgets the reports of this model's undecodable items that the store no longer holds
    /// (deleted here or by a pull, purged), besides those in `objects` (a result just read, which
    /// ``decode(_:)`` settles). They stayed listed until an ``item(id:)`` of each, and an
    /// app's "1 item skipped" stayed after the item was gone. One store read, only when there are
    /// reports of items `objects` does not hold.
    func forgetReportsOfGoneItems(besides objects: [JSONObject]) async {
        let reported = context.undecodable.ids(table: name, model: modelName)
        guard !reported.isEmpty else { return }
        let read = objects.compactMap(\.id).itemKeys
        let unseen = reported.filter { !read.contains(ItemID.Key($0)) }
        guard !unseen.isEmpty, let held = try? await context.store.read({ [name] in try $0.items(name, ids: unseen) })
        else { return }
        context.undecodable.clear(table: name, model: modelName, ids: unseen.filter { held[ItemID.Key($0)] == nil })
    }

    /// Decodes stored items by the policy: one that does not fit is reported, and skipped or thrown.
    func decode(_ objects: [JSONObject]) throws(SyncError) -> [Item] {
        var items: [Item] = []
        items.reserveCapacity(objects.count)
        // The ids that decoded, to clear earlier reports of them; only collected when there are some.
        var decodedIDs: [String]? = context.undecodable.isEmpty ? nil : []
        for object in objects {
            do {
                items.append(try model(of: object))
                if let id = object.id { decodedIDs?.append(id) }
            } catch {
                context.undecodable.report(error)
                if decodingPolicy == .strict { throw SyncError(.invalidItem, error.description, underlying: error) }
            }
        }
        if let decodedIDs { context.undecodable.clear(table: name, model: modelName, ids: decodedIDs) }
        return items
    }
}
