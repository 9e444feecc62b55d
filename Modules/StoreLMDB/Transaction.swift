import CLMDB
import SyncCore

/// The store's named LMDB databases, opened once per environment.
struct Databases: Sendable {
    /// `format`, `version`, `lastOperationId`, `lastErrorSeq`, `nextTableKey`.
    var meta: MDB_dbi
    /// Table name → catalog record (JSON).
    var tables: MDB_dbi
    /// `tableKey | id` → item value (see ``ItemValue``).
    var items: MDB_dbi
    /// `tableKey | kind | milliseconds | id` → empty: items by `updatedAt`.
    var updated: MDB_dbi
    /// Operation id (8 bytes) → operation JSON.
    var operations: MDB_dbi
    /// `"o" | table` → operation ids (sorted duplicates): each table's queue in order.
    var operationsByTable: MDB_dbi
    /// `length | table | item id` → operation ids (sorted duplicates).
    var operationsByItem: MDB_dbi
    /// Sequence number (8 bytes) → operation error JSON, oldest first.
    var errors: MDB_dbi
    /// `"e" | error id` → sequence numbers (sorted duplicates).
    var errorIDs: MDB_dbi
    /// `length | table | query id` → the delta tokens of that key (see ``DeltaTokenRecords``).
    var tokens: MDB_dbi

    /// Names and flags, in a fixed order.
    static let definitions: [(name: String, flags: Int32)] = [
        ("meta", 0), ("tables", 0), ("items", 0), ("updatedAt", 0), ("operations", 0),
        ("operationsByTable", MDB_DUPSORT | MDB_DUPFIXED), ("operationsByItem", MDB_DUPSORT | MDB_DUPFIXED),
        ("errors", 0), ("errorIds", MDB_DUPSORT | MDB_DUPFIXED), ("tokens", 0),
    ]

    init(_ handles: [MDB_dbi]) {
        meta = handles[0]
        tables = handles[1]
        items = handles[2]
        updated = handles[3]
        operations = handles[4]
        operationsByTable = handles[5]
        operationsByItem = handles[6]
        errors = handles[7]
        errorIDs = handles[8]
        tokens = handles[9]
    }
}

/// One LMDB transaction (read-only or read-write) with the store's databases.
///
/// Pointers it returns point into LMDB's map: valid until the transaction ends or, in a write
/// transaction, until the next write. Callers decode or copy them at once.
final class Txn {
    let handle: OpaquePointer
    let dbs: Databases
    /// "the LMDB store at '…'", for messages.
    let place: String
    /// Set when a write hit `MDB_MAP_FULL`: the transaction is then unusable and the writer grows
    /// the map and runs the body again, whatever the body did with the error.
    var hitMapFull = false
    /// Whether a write changed the database (a put or a delete that took effect). A commit without
    /// one leaves LMDB's transaction id where it was, so it must not count as a commit of this
    /// process when looking for other processes' (``Environment/othersCommitted()``).
    var wrote = false

    init(handle: OpaquePointer, dbs: Databases, place: String) {
        self.handle = handle
        self.dbs = dbs
        self.place = place
    }

    func check(_ rc: Int32, _ action: @autoclosure () -> String) throws(StoreError) {
        guard rc != MDB_SUCCESS else { return }
        if rc == MDB_MAP_FULL { hitMapFull = true }
        throw LMDBErrors.map(rc, action(), place)
    }

    func get(_ dbi: MDB_dbi, _ key: [UInt8]) throws(StoreError) -> UnsafeRawBufferPointer? {
        var data = MDB_val()
        let rc = key.withUnsafeBytes { bytes in
            var keyValue = MDB_val(mv_size: bytes.count, mv_data: UnsafeMutableRawPointer(mutating: bytes.baseAddress))
            return mdb_get(handle, dbi, &keyValue, &data)
        }
        if rc == MDB_NOTFOUND { return nil }
        try check(rc, "reading from")
        return UnsafeRawBufferPointer(start: data.mv_data, count: data.mv_size)
    }

    func put(_ dbi: MDB_dbi, _ key: [UInt8], _ value: [UInt8], flags: Int32 = 0) throws(StoreError) {
        let rc = key.withUnsafeBytes { keyBytes in
            value.withUnsafeBytes { valueBytes in
                var keyValue = MDB_val(
                    mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
                var dataValue = MDB_val(
                    mv_size: valueBytes.count, mv_data: UnsafeMutableRawPointer(mutating: valueBytes.baseAddress))
                return mdb_put(handle, dbi, &keyValue, &dataValue, UInt32(bitPattern: flags))
            }
        }
        try check(rc, "writing to")
        wrote = true
    }

    func put(_ dbi: MDB_dbi, _ key: [UInt8], _ value: UnsafeRawBufferPointer, flags: Int32 = 0) throws(StoreError) {
        let rc = key.withUnsafeBytes { keyBytes in
            var keyValue = MDB_val(
                mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
            var dataValue = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
            return mdb_put(handle, dbi, &keyValue, &dataValue, UInt32(bitPattern: flags))
        }
        try check(rc, "writing to")
        wrote = true
    }

    /// Writes `value` under `key` unless the key exists; then returns the existing value (and
    /// writes nothing). One tree descent either way.
    func insert(_ dbi: MDB_dbi, _ key: [UInt8], _ value: UnsafeRawBufferPointer) throws(StoreError)
        -> UnsafeRawBufferPointer?
    {
        var existing = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let rc = key.withUnsafeBytes { keyBytes in
            var keyValue = MDB_val(
                mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
            return mdb_put(handle, dbi, &keyValue, &existing, UInt32(MDB_NOOVERWRITE))
        }
        if rc == MDB_KEYEXIST { return UnsafeRawBufferPointer(start: existing.mv_data, count: existing.mv_size) }
        try check(rc, "writing to")
        wrote = true
        return nil
    }

    /// Appends `key` at the end of the database when it sorts after every key there (no tree
    /// descent, and pages filled rather than split in half); `false` when it does not, and then
    /// nothing was written. Keys that arrive in order (time-ordered ids, items pulled in `updatedAt`
    /// order) take this path.
    func append(_ dbi: MDB_dbi, _ key: [UInt8], _ value: UnsafeRawBufferPointer) throws(StoreError) -> Bool {
        var data = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let rc = key.withUnsafeBytes { keyBytes in
            var keyValue = MDB_val(
                mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
            return mdb_put(handle, dbi, &keyValue, &data, UInt32(MDB_APPEND))
        }
        if rc == MDB_KEYEXIST { return false }
        try check(rc, "writing to")
        wrote = true
        return true
    }

    /// Writes an index key (empty value), appending when it sorts last.
    func putIndex(_ dbi: MDB_dbi, _ key: [UInt8]) throws(StoreError) {
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        if try !append(dbi, key, empty) { try put(dbi, key, empty) }
    }

    /// Deletes a key (or one duplicate of it); `false` when it was absent.
    @discardableResult
    func delete(_ dbi: MDB_dbi, _ key: [UInt8], value: [UInt8]? = nil) throws(StoreError) -> Bool {
        let rc = key.withUnsafeBytes { keyBytes in
            var keyValue = MDB_val(
                mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
            guard let value else { return mdb_del(handle, dbi, &keyValue, nil) }
            return value.withUnsafeBytes { valueBytes in
                var dataValue = MDB_val(
                    mv_size: valueBytes.count, mv_data: UnsafeMutableRawPointer(mutating: valueBytes.baseAddress))
                return mdb_del(handle, dbi, &keyValue, &dataValue)
            }
        }
        if rc == MDB_NOTFOUND { return false }
        try check(rc, "deleting from")
        wrote = true
        return true
    }

    /// The number of entries in a database.
    func entryCount(_ dbi: MDB_dbi) throws(StoreError) -> Int {
        var stat = MDB_stat()
        try check(mdb_stat(handle, dbi, &stat), "reading the statistics of")
        return stat.ms_entries
    }

    /// Runs `body` with a cursor that is closed when it returns (before the transaction ends).
    func withCursor<T>(_ dbi: MDB_dbi, _ body: (Cursor) throws -> T) throws -> T {
        var cursor: OpaquePointer?
        try check(mdb_cursor_open(handle, dbi, &cursor), "opening a cursor on")
        guard let cursor else { throw LMDBErrors.map(MDB_BAD_TXN, "opening a cursor on", place) }
        defer { mdb_cursor_close(cursor) }
        return try body(Cursor(handle: cursor, txn: self))
    }
}

/// A cursor inside ``Txn/withCursor(_:_:)``.
struct Cursor {
    let handle: OpaquePointer
    let txn: Txn

    typealias Entry = (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)

    /// Moves the cursor; `nil` when there is no such entry.
    func get(_ op: MDB_cursor_op, key: [UInt8]? = nil, value: [UInt8]? = nil) throws(StoreError) -> Entry? {
        var keyValue = MDB_val()
        var dataValue = MDB_val()
        let rc: Int32
        if let key {
            rc = key.withUnsafeBytes { keyBytes in
                keyValue = MDB_val(
                    mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
                guard let value else { return mdb_cursor_get(handle, &keyValue, &dataValue, op) }
                return value.withUnsafeBytes { valueBytes in
                    dataValue = MDB_val(
                        mv_size: valueBytes.count, mv_data: UnsafeMutableRawPointer(mutating: valueBytes.baseAddress))
                    return mdb_cursor_get(handle, &keyValue, &dataValue, op)
                }
            }
        } else {
            rc = mdb_cursor_get(handle, &keyValue, &dataValue, op)
        }
        if rc == MDB_NOTFOUND { return nil }
        try txn.check(rc, "reading from")
        return (
            UnsafeRawBufferPointer(start: keyValue.mv_data, count: keyValue.mv_size),
            UnsafeRawBufferPointer(start: dataValue.mv_data, count: dataValue.mv_size)
        )
    }

    /// The number of duplicates of the current key.
    func duplicateCount() throws(StoreError) -> Int {
        var count = 0
        try txn.check(mdb_cursor_count(handle, &count), "counting in")
        return count
    }
}

extension UnsafeRawBufferPointer {
    /// Whether the bytes start with `prefix`.
    func hasPrefix(_ prefix: [UInt8]) -> Bool {
        guard count >= prefix.count else { return false }
        for index in prefix.indices where self[index] != prefix[index] { return false }
        return true
    }

    /// `memcmp` order against `other`: negative, zero or positive.
    func compare(_ other: [UInt8]) -> Int {
        let common = Swift.min(count, other.count)
        for index in 0..<common where self[index] != other[index] {
            return self[index] < other[index] ? -1 : 1
        }
        return count == other.count ? 0 : (count < other.count ? -1 : 1)
    }
}
