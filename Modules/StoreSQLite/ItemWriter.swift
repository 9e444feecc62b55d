import GRDB
import GRDBSQLite
import QuerySQL
@_spi(StoreSupport) import SyncCore

/// Writes the rows of an upsert through one prepared statement with the SQLite C API.
///
/// Each item's JSON is written into one reused buffer and bound straight from it, and the columns
/// are bound one by one: no `String`, no `StatementArguments` and no `DatabaseValue` per item. For
/// a pull that applies thousands of items per transaction this is half of what an upsert costs
/// (Tools/StoreBenchmark). Runs inside a GRDB write transaction on its connection; an error
/// becomes a `DatabaseError`, which rolls the transaction back.
struct ItemWriter: ~Copyable {
    private let connection: OpaquePointer
    private let statement: OpaquePointer
    /// GRDB's cached statement for the upsert of this table: prepared once per connection, kept
    /// alive while this writer uses its handle (a bulk import creates one writer per item).
    private let cached: Statement
    private let sql: String
    private var buffer: JSONTextBuffer

    init(_ db: Database, table sqlName: String) throws {
        guard let connection = db.sqliteConnection else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "the connection is closed")
        }
        let sql = ItemTable.upsertSQL(sqlName)
        cached = try db.cachedStatement(sql: sql)
        self.connection = connection
        self.sql = sql
        self.statement = cached.sqliteStatement
        self.buffer = JSONTextBuffer(capacity: 1024)
    }

    deinit {
        // The statement stays GRDB's (cached for the next writer): only reset it.
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
    }

    /// Inserts or replaces the row of `item`, whose id is `id`.
    mutating func write(id: String, item: JSONObject) throws {
        buffer.removeAll()
        // Members in dictionary order (only SQLite's JSON functions read the row), nested objects
        // sorted so that equal values have equal text.
        buffer.append(UInt8(ascii: "{"))
        var first = true
        for (key, member) in item {
            if !first { buffer.append(UInt8(ascii: ",")) }
            first = false
            buffer.appendJSONString(key)
            buffer.append(UInt8(ascii: ":"))
            buffer.appendJSON(member, sortingKeys: true, depth: 2)
        }
        buffer.append(UInt8(ascii: "}"))

        sqlite3_reset(statement)
        bindText(statement, 1, id)
        switch item["updatedAt"] {
        case nil, .null?:
            sqlite3_bind_null(statement, 2)
            sqlite3_bind_null(statement, 3)
        case .string(let text)?:
            if let milliseconds = SQLCompiler.instantMilliseconds(text) {
                sqlite3_bind_int64(statement, 2, milliseconds)
                sqlite3_bind_null(statement, 3)
            } else {
                sqlite3_bind_null(statement, 2)
                sqlite3_bind_int64(statement, 3, 1)
            }
        default:
            sqlite3_bind_null(statement, 2)
            sqlite3_bind_int64(statement, 3, 1)
        }
        sqlite3_bind_int64(statement, 4, item.isDeleted ? 1 : 0)
        if let version = item.version, !version.utf8.contains(0) {
            bindText(statement, 5, version)
        } else {
            sqlite3_bind_null(statement, 5)
        }
        if buffer.containsEscapedNUL {
            sqlite3_bind_int64(statement, 6, 1)
        } else {
            sqlite3_bind_null(statement, 6)
        }
        let code = buffer.withBytes { bytes in
            // SQLITE_STATIC: the buffer does not change before the step below.
            sqlite3_bind_text(statement, 7, bytes.baseAddress, Int32(bytes.count), nil)
            return sqlite3_step(statement)
        }
        guard code == SQLITE_DONE else {
            let message = String(cString: sqlite3_errmsg(connection))
            sqlite3_reset(statement)
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: message, sql: sql)
        }
        // Every parameter is bound again before the next step, and the statement is finalized with
        // the writer, so the buffer pointer left bound is never read.
    }
}

/// Binds `text` to parameter `index` of `statement`; SQLite copies the bytes.
func bindText(_ statement: OpaquePointer, _ index: Int32, _ text: String) {
    var text = text
    text.withUTF8 { bytes in
        // A non-nil pointer even for "": a nil one would bind NULL.
        let pointer = bytes.baseAddress ?? UnsafePointer<UInt8>(bitPattern: 1)!
        _ = sqlite3_bind_text(
            statement, index, UnsafeRawPointer(pointer).assumingMemoryBound(to: CChar.self), Int32(bytes.count),
            sqliteTransient)
    }
}

/// SQLite's `SQLITE_TRANSIENT`: SQLite copies the bytes before the call returns.
private let sqliteTransient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)
