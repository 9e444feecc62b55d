#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// A `Codable` model of one table: the table's name and the model's id, so that
/// `context.table(Todo.self)` needs nothing more.
///
/// The id is the item's `id` field (keep its coding key `id`). It is a ``SyncModelID``: `String`,
/// `UUID`, or an optional of either. An insert generates the id when it is ``SyncModelID/unassigned``
/// (an empty string, the nil UUID, or `nil`), so the id can stay non-optional:
///
/// ```swift
/// struct Todo: SyncModel {
///     static let tableName = "todo"
///     var id: UUID = .unassigned     // generated on insert: a UUIDv7, which sorts by time
///     var title: String
///     var due: Date?                 // "2023-11-14T22:13:20.123Z" on the wire
///     var done = false
/// }
/// let todos = context.table(Todo.self)
/// let milk = try await todos.insert(Todo(title: "Milk"))   // milk.id is the generated id
/// try await todos.delete(id: milk.id)
/// ```
///
/// A `UUID` id is written in lowercase. Ids are compared as written, so a model whose items get
/// uppercase ids from another client needs a `String` id: a typed read reports such an item as not
/// fitting (see ``UndecodableItem``) rather than update or delete a different id later.
public protocol SyncModel: Codable, Sendable, Identifiable where ID: SyncModelID {
    /// The name of the model's table, as the server knows it.
    static var tableName: String { get }
}

/// The type of a ``SyncModel``'s id: `String`, `UUID`, or an optional of either.
///
/// Another type can conform when it encodes as a string (a `RawRepresentable` struct around a
/// `String`, say) and names the value that means "no id yet".
///
/// ```swift
/// struct Todo: SyncModel {
///     static let tableName = "todo"
///     var id: String = .unassigned   // "": the insert generates one
///     var title: String
/// }
/// ```
public protocol SyncModelID: Hashable, Sendable, Codable {
    /// The value that means "no id yet": an insert generates the id.
    static var unassigned: Self { get }
    /// Whether this is an id that an insert replaces by a generated one (by default: it is
    /// ``unassigned``).
    var isUnassigned: Bool { get }
}

extension SyncModelID {
    public var isUnassigned: Bool { self == Self.unassigned }
}

extension String: SyncModelID {
    /// The empty string: an insert generates the id.
    public static var unassigned: String { "" }
}

extension UUID: SyncModelID {
    /// The nil UUID, `00000000-0000-0000-0000-000000000000`: an insert generates the id (a UUIDv7).
    public static var unassigned: UUID { UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)) }
}

extension Optional: SyncModelID where Wrapped: SyncModelID {
    /// `nil`: an insert generates the id.
    public static var unassigned: Wrapped? { nil }
    /// `nil`, or an unassigned value.
    public var isUnassigned: Bool { self?.isUnassigned ?? true }
}

extension SyncModel {
    /// Whether the insert generates the id.
    var hasUnassignedID: Bool { id.isUnassigned }

    /// The id as the item stores it, or `nil` when it has none.
    var storedID: String? { (try? JSONValueEncoder().encode(id))?.stringValue }
}

extension SyncContext {
    /// The handle for the table of a ``SyncModel``.
    ///
    /// ```swift
    /// let todos = context.table(Todo.self)
    /// for try await open in todos.observe(TypedQuery<Todo>(where: \.done == false)) { show(open) }
    /// ```
    ///
    /// - Parameters:
    ///   - type: The model; its ``SyncModel/tableName`` names the table.
    ///   - decoding: What a read does with a stored item that does not decode as `Model`.
    public nonisolated func table<Model: SyncModel>(
        _ type: Model.Type, decoding: DecodingPolicy = .skipAndReport
    ) -> TypedSyncTable<Model> {
        table(Model.tableName, of: type, decoding: decoding)
    }
}

extension TypedSyncTable {
    /// The local model whose id is `id` (stored in lowercase), or `nil`; throws as the `String`
    /// form does.
    ///
    /// ```swift
    /// let milk = try await todos.item(id: milkID)   // milkID: UUID
    /// ```
    public func item(id: UUID) async throws(SyncError) -> Item? {
        try await item(id: id.wireText)
    }

    /// Deletes the model whose id is `id` (stored in lowercase) and queues a delete.
    ///
    /// ```swift
    /// try await todos.delete(id: milk.id)   // milk.id: UUID
    /// ```
    public func delete(id: UUID) async throws(SyncError) {
        try await delete(id: id.wireText)
    }
}
