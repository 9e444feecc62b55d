import GRDB
import GRDBSQLite
@_spi(StoreSupport) import SyncCore

/// Writes queued operations with one cached statement, writing each operation's JSON (the members
/// of `QueuedOperation.json`) straight into a reused buffer and binding it with the C API: a bulk
/// import queues one operation per item and a push rewrites each one it marks in flight, and
/// building a dictionary, serializing it and going through GRDB's arguments for each cost more than
/// the statement itself (8% of a push's client time).
struct OperationWriter: ~Copyable {
    /// What the writer does with each operation: both statements take `?1` id, `?2` table, `?3`
    /// item id and `?4` JSON.
    enum Action: String {
        case insert = "INSERT INTO ferry_operations (id, tableName, itemId, json) VALUES (?1, ?2, ?3, ?4)"
        /// Rewrites the JSON of an operation of the same table and item (an operation's table and
        /// item never change in Ferry's use). The indexed columns are not set: SQLite rewrites the
        /// entries of every index on a column an `UPDATE` sets, even to the same value, and that
        /// made each update about 4 times as costly (a push marks every operation it sends).
        case update = "UPDATE ferry_operations SET json = ?4 WHERE id = ?1 AND tableName = ?2 AND itemId = ?3"
        /// Rewrites a whole operation, its table and item included.
        case move = "UPDATE ferry_operations SET tableName = ?2, itemId = ?3, json = ?4 WHERE id = ?1"
    }

    private let connection: OpaquePointer
    private let statement: OpaquePointer
    private let cached: Statement
    private let sql: String
    private var buffer = JSONTextBuffer(capacity: 512)
    /// The text of the last `createdAt` written (an import's operations share one).
    private var lastCreatedAt: (Timestamp, String)?

    init(_ db: Database, _ action: Action = .insert) throws {
        guard let connection = db.sqliteConnection else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "the connection is closed")
        }
        let cached = try db.cachedStatement(sql: action.rawValue)
        sql = action.rawValue
        self.cached = cached
        self.connection = connection
        statement = cached.sqliteStatement
    }

    deinit {
        // The statement stays GRDB's (cached for the next writer): only reset it.
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
    }

    /// Writes `operation`; answers how many rows the statement changed (an update of an absent id
    /// changes none).
    @discardableResult
    mutating func write(_ operation: QueuedOperation) throws -> Int {
        let createdAt: String
        if let (time, text) = lastCreatedAt, time == operation.createdAt {
            createdAt = text
        } else {
            createdAt = operation.createdAt.iso8601
            lastCreatedAt = (operation.createdAt, createdAt)
        }
        buffer.removeAll()
        buffer.append("{\"attempts\":")
        buffer.appendInteger(Int64(operation.attempts))
        if let baseItem = operation.baseItem {
            buffer.append(",\"baseItem\":")
            _ = buffer.appendJSON(.object(baseItem), sortingKeys: true, depth: 2)
        }
        buffer.append(",\"createdAt\":")
        buffer.appendJSONString(createdAt)
        buffer.append(",\"id\":")
        buffer.appendInteger(operation.id)
        if let item = operation.item {
            buffer.append(",\"item\":")
            _ = buffer.appendJSON(.object(item), sortingKeys: true, depth: 2)
        }
        buffer.append(",\"itemId\":")
        buffer.appendJSONString(operation.itemID)
        buffer.append(",\"kind\":")
        buffer.appendJSONString(operation.kind.rawValue)
        buffer.append(",\"state\":")
        buffer.appendJSONString(operation.state.rawValue)
        buffer.append(",\"table\":")
        buffer.appendJSONString(operation.table)
        buffer.append(UInt8(ascii: "}"))

        sqlite3_reset(statement)
        sqlite3_bind_int64(statement, 1, operation.id)
        bindText(statement, 2, operation.table)
        bindText(statement, 3, operation.itemID)
        let code = buffer.withBytes { bytes in
            // SQLITE_STATIC: the buffer does not change before the step below.
            sqlite3_bind_text(statement, 4, bytes.baseAddress, Int32(bytes.count), nil)
            return sqlite3_step(statement)
        }
        guard code == SQLITE_DONE else {
            let message = String(cString: sqlite3_errmsg(connection))
            sqlite3_reset(statement)
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: sql)
        }
        return Int(sqlite3_changes(connection))
    }
}
