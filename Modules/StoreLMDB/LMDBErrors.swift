import CLMDB
import SyncCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#elseif canImport(Musl)
    import Musl
#endif

/// A failure reported by liblmdb: LMDB's own code (`MDB_MAP_FULL`, …) or a system `errno`, with
/// `mdb_strerror`'s text. It is the `underlying` error of the `StoreError` a store throws.
///
/// ```swift
/// do {
///     _ = try LMDBStore(path: "/no/such/parent/app.ferry")
/// } catch let error as StoreError {
///     print(error.code, (error.underlying as? LMDBError)?.code ?? 0)
/// }
/// ```
public struct LMDBError: Error, Sendable, Hashable, CustomStringConvertible {
    /// LMDB's return code: negative for LMDB's own errors, an `errno` value otherwise.
    public var code: Int32
    /// What liblmdb says about the code.
    public var message: String

    public init(code: Int32) {
        self.code = code
        self.message = String(cString: mdb_strerror(code))
    }

    public var description: String { "LMDB error \(code): \(message)" }
}

/// Maps LMDB's return codes to ``StoreError`` codes, keeping an ``LMDBError`` in `underlying`.
///
/// | LMDB | code |
/// | --- | --- |
/// | `MDB_MAP_FULL` (once the map cannot grow), `MDB_TXN_FULL`, `ENOSPC`, `ENOMEM` | `full` |
/// | `MDB_INVALID`, `MDB_CORRUPTED`, `MDB_PAGE_NOTFOUND`, `MDB_VERSION_MISMATCH`, `MDB_INCOMPATIBLE`, `MDB_PANIC` | `corrupt` |
/// | `MDB_READERS_FULL`, `EAGAIN`, `EBUSY` | `busy` |
/// | `EACCES`, `EPERM`, `EROFS` | `readOnly` |
/// | anything else | `io` |
enum LMDBErrors {
    static func code(of rc: Int32) -> StoreError.Code {
        switch rc {
        case MDB_MAP_FULL, MDB_TXN_FULL, MDB_PAGE_FULL, MDB_CURSOR_FULL, ENOSPC, ENOMEM: .full
        case MDB_INVALID, MDB_CORRUPTED, MDB_PAGE_NOTFOUND, MDB_VERSION_MISMATCH, MDB_INCOMPATIBLE, MDB_PANIC: .corrupt
        case MDB_READERS_FULL, EAGAIN, EBUSY: .busy
        case EACCES, EPERM, EROFS: .readOnly
        default: .io
        }
    }

    /// "<action> <place> failed: <reason> (LMDB: <message>)", on one line.
    static func map(_ rc: Int32, _ action: String, _ place: String, code: StoreError.Code? = nil) -> StoreError {
        let code = code ?? self.code(of: rc)
        let reason: String
        switch code {
        case .full:
            reason =
                rc == MDB_TXN_FULL
                ? "the transaction changes more pages than LMDB allows in one transaction"
                : "the disk or the store's map is full"
        case .corrupt: reason = "the environment is damaged or is not an LMDB environment"
        case .busy: reason = "the environment is locked or has no free reader slot"
        case .readOnly: reason = "the location cannot be written"
        default: reason = "an input or output error occurred"
        }
        let native = LMDBError(code: rc)
        return StoreError(code, "\(action) \(place) failed: \(reason) (LMDB: \(native.message))", underlying: native)
    }

    static func corruptValue(_ what: @autoclosure () -> String, _ place: String) -> StoreError {
        StoreError(.corrupt, "\(what()) in \(place) is damaged (a stored value has an unexpected layout)")
    }
}
