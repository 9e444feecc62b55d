/// The attachment queue's reads and writes inside store transactions: the rows of `__attachments`.
/// Every function runs in the caller's transaction, so an attachment commits together with the
/// item and the operation written beside it.
enum AttachmentQueue {
    static let table = AttachmentRow.table

    static func rows(_ reader: any StoreReader, _ filter: QueryExpression?, orderBy: [SortKey] = [], top: Int? = nil)
        throws -> [(id: String, attachment: ItemAttachment)]
    {
        try reader.query(table, TableQuery(filter: filter, orderBy: orderBy, top: top)).items
            .compactMap(AttachmentRow.attachment)
    }

    static func itemFilter(table itemTable: String, itemID: String) -> QueryExpression {
        .field("table").eq(itemTable) && .field("itemID").eq(itemID)
    }

    /// The item's attachments, by name.
    static func attachments(of itemID: String, table itemTable: String, in reader: any StoreReader) throws
        -> [ItemAttachment]
    {
        try rows(reader, itemFilter(table: itemTable, itemID: itemID), orderBy: [.field("name")]).map(\.attachment)
    }

    /// The row of one attachment.
    static func find(table itemTable: String, itemID: String, name: String, in reader: any StoreReader) throws
        -> (id: String, attachment: ItemAttachment)?
    {
        try rows(reader, itemFilter(table: itemTable, itemID: itemID) && .field("name").eq(name), top: 1).first
    }

    /// The next queue position.
    static func nextSequence(in reader: any StoreReader) throws -> Int64 {
        let last = try rows(reader, nil, orderBy: [.field("sequence", descending: true)], top: 1).first
        return (last?.attachment.sequence ?? 0) + 1
    }

    /// The table's definition: indexes for the lookups above (a store that declares indexes uses them).
    static let definition = TableDefinition(
        name: table, indexes: [["table", "itemID", "name"], ["state", "sequence"], ["sha256"]])

    /// Writes an attachment: replaces the row of the same table, item and name, or adds one.
    static func save(_ attachment: ItemAttachment, in tx: any StoreTransaction) throws {
        if try tx.definition(of: table) == nil { try tx.define(definition) }
        let existing = try find(table: attachment.table, itemID: attachment.itemID, name: attachment.name, in: tx)
        try tx.upsert(table, [AttachmentRow.object(attachment, id: existing?.id ?? ItemID.generate())])
    }

    /// Removes an attachment's row.
    static func remove(table itemTable: String, itemID: String, name: String, in tx: any StoreTransaction) throws {
        if let existing = try find(table: itemTable, itemID: itemID, name: name, in: tx) {
            try tx.delete(table, ids: [existing.id])
        }
    }

    /// Queued uploads and deletes in queue order.
    static func queued(in reader: any StoreReader) throws -> [ItemAttachment] {
        let states =
            QueryExpression.field("state").eq(AttachmentState.pendingUpload.rawValue)
            || .field("state").eq(AttachmentState.pendingDelete.rawValue)
        return try rows(reader, states, orderBy: [.field("sequence")]).map(\.attachment)
    }

    /// Every attachment in a state, optionally of one table.
    static func attachments(in state: AttachmentState, table itemTable: String? = nil, in reader: any StoreReader)
        throws -> [ItemAttachment]
    {
        var filter = QueryExpression.field("state").eq(state.rawValue)
        if let itemTable { filter = filter && .field("table").eq(itemTable) }
        return try rows(reader, filter, orderBy: [.field("sequence")]).map(\.attachment)
    }

    /// Whether a row other than `except` keeps a local file of this content.
    static func contentInUse(_ sha256: String, except: ItemAttachment?, in reader: any StoreReader) throws -> Bool {
        try rows(reader, .field("sha256").eq(sha256)).contains { _, other in
            other.state.hasLocalFile
                && (except.map { other.table != $0.table || other.itemID != $0.itemID || other.name != $0.name }
                    ?? true)
        }
    }

    /// Whether the item's insert is still queued: the server does not know the item yet.
    static func insertQueued(table itemTable: String, itemID: String, in reader: any StoreReader) throws -> Bool {
        try reader.operations(table: itemTable, itemID: itemID).contains { $0.kind == .insert }
    }
}
