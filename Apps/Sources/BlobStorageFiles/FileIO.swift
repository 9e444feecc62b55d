import Dispatch
import ServerStorageCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The system calls the file-system backend makes, with `EINTR` retried and failures as
/// `BlobStorageError`s, and a queue to run them on, off the cooperative thread pool.
enum FileIO {
    /// Where blocking file work runs: never on the threads of Swift's cooperative pool.
    static let queue = DispatchQueue(label: "ferry.blobs.files", attributes: .concurrent)

    /// Runs `body` on ``queue`` and returns its result.
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    /// A failure of `call` on `path` as a `BlobStorageError`: `full` (507) for a full disk, a
    /// quota, or a file past the size limit of the file system or the process (`EFBIG`, which a
    /// probe met as a 500 `io`); `io` otherwise.
    static func failure(_ call: String, _ path: String, _ code: Int32 = errno) -> BlobStorageError {
        let reason = String(cString: strerror(code))
        let kind: BlobStorageError.Code = [ENOSPC, EDQUOT, EFBIG].contains(code) ? .full : .io
        return BlobStorageError(kind, "\(call) \(path) failed: \(reason)")
    }

    static func retrying(_ body: () -> Int32) -> Int32 {
        while true {
            let result = body()
            if result == -1 && errno == EINTR { continue }
            return result
        }
    }

    /// Opens `path`; `nil` when it does not exist (and `flags` do not create it).
    static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o644) throws -> Int32? {
        let fd = retrying { systemOpen(path, flags | O_CLOEXEC, mode) }
        if fd >= 0 { return fd }
        if errno == ENOENT { return nil }
        throw failure("opening", path)
    }

    static func close(_ fd: Int32) {
        _ = systemClose(fd)
    }

    static func lock(_ fd: Int32, exclusive: Bool, path: String) throws {
        guard retrying({ flock(fd, exclusive ? LOCK_EX : LOCK_SH) }) == 0 else { throw failure("locking", path) }
    }

    /// Whether the file `fd` is open on still has a name (it was not removed meanwhile).
    static func isLinked(_ fd: Int32, path: String) throws -> Bool {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure("inspecting", path) }
        return info.st_nlink > 0
    }

    static func size(_ fd: Int32, path: String) throws -> Int64 {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure("inspecting", path) }
        return Int64(info.st_size)
    }

    /// The device and inode of `fd`: which file it is, whatever its name.
    static func identity(_ fd: Int32, path: String) throws -> [UInt64] {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure("inspecting", path) }
        return [UInt64(info.st_dev), UInt64(info.st_ino)]
    }

    /// The device and inode of `path`, or `nil` when it does not exist.
    static func identity(path: String) throws -> [UInt64]? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return nil }
            throw failure("inspecting", path)
        }
        return [UInt64(info.st_dev), UInt64(info.st_ino)]
    }

    /// When `path` was last modified, in milliseconds since 1970, or `nil` when it does not exist.
    static func modified(_ path: String) -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        #if canImport(Darwin)
            let time = info.st_mtimespec
        #else
            let time = info.st_mtim
        #endif
        return Int64(time.tv_sec) * 1000 + Int64(time.tv_nsec) / 1_000_000
    }

    /// The size of `path`, or `nil` when it does not exist.
    static func size(_ path: String) -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_size)
    }

    /// Sets the modification time of `fd` to now.
    static func touch(_ fd: Int32, path: String) throws {
        guard futimens(fd, nil) == 0 else { throw failure("stamping", path) }
    }

    /// The names in the directory `path` (none when it does not exist).
    static func names(in path: String) throws -> [String] {
        guard let directory = opendir(path) else {
            if errno == ENOENT { return [] }
            throw failure("listing", path)
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Reads up to `count` bytes at `offset` (fewer at the end of the file).
    static func read(_ fd: Int32, count: Int, at offset: Int64, path: String) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                pread(fd, buffer.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw failure("reading", path)
            }
            if got == 0 { break }
            done += got
        }
        if done < count { bytes.removeLast(count - done) }
        return bytes
    }

    /// Writes all of `bytes` at `offset`.
    static func write(_ fd: Int32, _ bytes: [UInt8], at offset: Int64, path: String) throws {
        var done = 0
        while done < bytes.count {
            let wrote = bytes.withUnsafeBytes { buffer in
                pwrite(fd, buffer.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            }
            if wrote < 0 {
                if errno == EINTR { continue }
                throw failure("writing", path)
            }
            done += wrote
        }
    }

    static func truncate(_ fd: Int32, to length: Int64, path: String) throws {
        guard retrying({ ftruncate(fd, off_t(length)) }) == 0 else { throw failure("truncating", path) }
    }

    /// Makes the file's data (and the size it needs to read it) durable.
    static func syncData(_ fd: Int32, path: String) throws {
        #if canImport(Darwin)
            let result = retrying { fsync(fd) }
        #else
            let result = retrying { fdatasync(fd) }
        #endif
        guard result == 0 else { throw failure("syncing", path) }
    }

    /// Makes the file, metadata included, durable.
    static func sync(_ fd: Int32, path: String) throws {
        guard retrying({ fsync(fd) }) == 0 else { throw failure("syncing", path) }
    }

    /// Makes the entries of the directory `path` (files created, renamed or removed) durable.
    static func syncDirectory(_ path: String) throws {
        guard let fd = try open(path, O_RDONLY | O_DIRECTORY) else { throw failure("opening", path, ENOENT) }
        defer { close(fd) }
        try sync(fd, path: path)
    }

    /// Creates the directory `path`; whether it was created (`false`: it existed).
    @discardableResult
    static func makeDirectory(_ path: String) throws -> Bool {
        if mkdir(path, 0o755) == 0 { return true }
        if errno == EEXIST { return false }
        throw failure("creating the directory", path)
    }

    /// Creates `path` and the directories above it that are missing (`mkdir -p`). A failure names
    /// the directory that could not be made and the system's reason (`Not a directory`,
    /// `Permission denied`), where Foundation's `createDirectory` said only "error 512".
    static func makeDirectories(_ path: String) throws {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            guard mkdir(prefix, 0o755) != 0, errno != EEXIST else { continue }
            throw failure("creating the directory", prefix)
        }
        var status = stat()
        guard stat(path, &status) == 0 else { throw failure("creating the directory", path) }
        guard status.st_mode & S_IFMT == S_IFDIR else { throw failure("creating the directory", path, ENOTDIR) }
    }

    /// Removes `path`; whether it existed.
    @discardableResult
    static func remove(_ path: String) throws -> Bool {
        if unlink(path) == 0 { return true }
        if errno == ENOENT { return false }
        throw failure("removing", path)
    }

    static func rename(_ from: String, _ to: String) throws {
        guard systemRename(from, to) == 0 else { throw failure("renaming \(from) to", to) }
    }

    /// Makes `to` a second name of the file `from`, unless `to` exists; whether it did (`false`: it
    /// existed, and is left as it was).
    static func linkUnlessExists(_ from: String, _ to: String) throws -> Bool {
        if link(from, to) == 0 { return true }
        if errno == EEXIST { return false }
        throw failure("linking \(from) to", to)
    }
}

// The C functions whose names the enum's own methods shadow.
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
    open(path, flags, mode)
}

private func systemClose(_ fd: Int32) -> Int32 {
    close(fd)
}

private func systemRename(_ from: String, _ to: String) -> Int32 {
    rename(from, to)
}
