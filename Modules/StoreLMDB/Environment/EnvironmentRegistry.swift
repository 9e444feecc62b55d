import CLMDB
import Foundation
import Logging
import Synchronization
import SyncCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#elseif canImport(Musl)
    import Musl
#endif

/// The process-wide table of open environments, by canonical directory path.
enum EnvironmentRegistry {
    private static let environments = Mutex<[String: Environment]>([:])

    /// The environment of `path`: the open one, or a newly opened one. The caller owns one reference.
    static func open(
        path: String, configuration: LMDBStore.Configuration, place: String, logger: Logger
    ) throws(StoreError) -> Environment {
        try environments.withLock { (open: inout [String: Environment]) throws(StoreError) -> Environment in
            let (directory, created) = try StoreDirectory.prepare(path, place: place)
            if let environment = open[directory] {
                environment.references += 1
                return environment
            }
            do throws(StoreError) {
                let environment = try Environment.open(
                    directory: directory, configuration: configuration, place: place, logger: logger)
                open[directory] = environment
                logger.debug("opened an LMDB environment", metadata: ["path": "\(directory)"])
                return environment
            } catch {
                if created { try? FileManager.default.removeItem(atPath: directory) }
                throw error
            }
        }
    }

    /// Drops a reference; the last one closes the environment.
    static func release(_ environment: Environment) {
        environments.withLock { open in
            environment.references -= 1
            guard environment.references == 0 else { return }
            open[environment.path] = nil
            environment.stopLooking()
            mdb_env_close(environment.handle)
            environment.logger.debug("closed an LMDB environment", metadata: ["path": "\(environment.path)"])
        }
    }

    /// Whether the environment of the directory `path` is open in this process (for tests).
    static func isOpen(_ path: String) -> Bool {
        guard let resolved = realpath(path, nil) else { return false }
        defer { free(resolved) }
        let canonical = String(cString: resolved)
        return environments.withLock { $0[canonical] != nil }
    }
}

/// Where a store's directory is, made ready to open.
enum StoreDirectory {
    /// The canonical path of the store's directory, created when absent (its parent must exist),
    /// and whether this call created it.
    static func prepare(_ path: String, place: String) throws(StoreError) -> (String, Bool) {
        guard !path.isEmpty else { throw StoreError(.io, "cannot open \(place): the path is empty") }
        let absolute =
            path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let standardized = (absolute as NSString).standardizingPath
        var isDirectory: ObjCBool = false
        var created = false
        if FileManager.default.fileExists(atPath: standardized, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else {
                throw StoreError(
                    .io,
                    "cannot open \(place): the path is a file, not a store directory (an LMDB store is a directory); it was left untouched"
                )
            }
        } else {
            let parent = (standardized as NSString).deletingLastPathComponent
            var parentIsDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: parent, isDirectory: &parentIsDirectory) else {
                throw StoreError(.io, "cannot open \(place): the directory '\(parent)' does not exist")
            }
            guard parentIsDirectory.boolValue else {
                throw StoreError(.io, "cannot open \(place): '\(parent)' is not a directory")
            }
            if mkdir(standardized, 0o755) != 0 {
                let code = errno
                if code != EEXIST {
                    let storeCode: StoreError.Code = code == EACCES || code == EPERM || code == EROFS ? .readOnly : .io
                    throw LMDBErrors.map(code, "creating the directory of", place, code: storeCode)
                }
            } else {
                created = true
            }
        }
        guard let resolved = realpath(standardized, nil) else {
            throw LMDBErrors.map(errno, "resolving the path of", place, code: .io)
        }
        defer { free(resolved) }
        return (String(cString: resolved), created)
    }
}
