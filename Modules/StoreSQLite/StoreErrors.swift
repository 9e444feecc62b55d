import GRDB
import SyncCore

/// Maps SQLite's errors to `StoreError` codes, keeping GRDB's `DatabaseError` in `underlying`.
///
/// | SQLite | code |
/// | --- | --- |
/// | `SQLITE_CORRUPT`, `SQLITE_NOTADB` | `corrupt` |
/// | `SQLITE_BUSY`, `SQLITE_LOCKED` | `busy` |
/// | `SQLITE_READONLY`, `SQLITE_CANTOPEN` in a location that cannot be written | `readOnly` |
/// | `SQLITE_FULL` | `full` |
/// | `SQLITE_CONSTRAINT` | `constraint` |
/// | anything else | `io` |
enum StoreErrors {
    static func code(of error: DatabaseError) -> StoreError.Code {
        switch error.resultCode {
        case .SQLITE_CORRUPT, .SQLITE_NOTADB: .corrupt
        case .SQLITE_BUSY, .SQLITE_LOCKED: .busy
        case .SQLITE_READONLY: .readOnly
        case .SQLITE_FULL: .full
        case .SQLITE_CONSTRAINT: .constraint
        default: .io
        }
    }

    /// "<action> <place> failed: <reason> (SQLite: <message>)", on one line.
    static func map(_ error: DatabaseError, _ action: String, _ place: String, code: StoreError.Code? = nil)
        -> StoreError
    {
        let code = code ?? self.code(of: error)
        let reason: String
        switch code {
        case .corrupt: reason = "the file is damaged or is not a SQLite database"
        case .busy: reason = "the database is locked by another connection or process"
        case .readOnly: reason = "the location cannot be written"
        case .full: reason = "the disk is full"
        case .constraint: reason = "a constraint was violated"
        default: reason = "an input or output error occurred"
        }
        let native = oneLine(error.message ?? "\(error.resultCode)")
        return StoreError(code, "\(action) \(place) failed: \(reason) (SQLite: \(native))", underlying: error)
    }

    static func oneLine(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }

    /// Maps an error from GRDB, leaving `StoreError` and the caller's own errors unchanged.
    static func mapIfNeeded(_ error: any Error, _ action: String, _ place: String) -> any Error {
        if let error = error as? DatabaseError { return map(error, action, place) }
        return error
    }
}
