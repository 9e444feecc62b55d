public import Foundation
public import SyncCore
import Synchronization
import Transport

/// Attachments on the CLI's device: files that belong to items, queued with the store's writes and
/// moved by `push`, `pull` and `get` (docs/attachments.md). The files live in
/// ``StoreLocation/attachmentsDirectory`` (`<store>.attachments/`).
///
/// ```swift
/// let device = try Device(name: "cli", store: .sqlite("phone.ferry"), server: settings)
/// try await device.attach("notes", id: "a1", file: "scan.pdf")
/// _ = try await device.push()  // the upload
/// ```
extension Device {
    /// The context, given the attachment configuration the first time (the device's files, the
    /// server through the connection switch, downloads on demand).
    func prepared() async -> SyncContext {
        if !attachmentsConfigured, let attachmentFiles {
            await context.useAttachments(AttachmentConfiguration(files: attachmentFiles, remote: connectivity))
            attachmentsConfigured = true
        }
        return context
    }

    /// Attaches the file at `path` to a stored item under `name` (the file's own name by default)
    /// and queues its upload; the next push sends it. The file is copied into the device's
    /// attachments directory.
    ///
    /// - Throws: `ClientError` `.notFound` for a missing file or item, `.usage` for a directory or
    ///   a bad name, `.failed` for a file that cannot be read.
    @discardableResult
    public func attach(_ table: String, id: String, file path: String, name: String? = nil, contentType: String? = nil)
        async throws -> ItemAttachment
    {
        let files = FileManager.default
        var isDirectory: ObjCBool = false
        guard files.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ClientError(.notFound, "no file '\(path)'", hint: "FILE is the path of the file to attach")
        }
        guard !isDirectory.boolValue else {
            throw ClientError(.usage, "'\(path)' is a directory", hint: "attach one file at a time")
        }
        guard files.isReadableFile(atPath: path), let handle = FileHandle(forReadingAtPath: path) else {
            throw ClientError(.failed, "cannot read '\(path)': permission denied")
        }
        try? handle.close()
        let url = URL(fileURLWithPath: path)
        let name = name ?? url.lastPathComponent
        try AttachmentName.validate(name)
        let handleTable = await prepared().table(table)
        guard try await handleTable.item(id: id) != nil else {
            throw ClientError(.notFound, "no item '\(id)' in '\(table)'", hint: "`query \(table)` lists them")
        }
        return try await handleTable.attach(
            file: url, to: id, name: name, contentType: contentType ?? Self.contentType(of: url))
    }

    /// The item's attachments, by name (those waiting to be deleted on the server included).
    ///
    /// - Throws: `ClientError` `.notFound` when the item has none and is not stored.
    public func attachments(_ table: String, id: String) async throws -> [ItemAttachment] {
        let handle = await prepared().table(table)
        let list = try await handle.attachments(of: id)
        if list.isEmpty, try await handle.item(id: id) == nil {
            throw ClientError(.notFound, "no item '\(id)' in '\(table)'", hint: "`query \(table)` lists them")
        }
        return list
    }

    /// The local file of an attachment (read it, do not change it), downloaded first when it is not
    /// on the device.
    ///
    /// - Throws: `ClientError` `.notFound` (no such item or attachment), `.unreachable` when the file
    ///   is not on the device and cannot be downloaded now (offline, no server, server unreachable).
    public func attachmentFile(_ table: String, id: String, name: String) async throws -> AttachmentFile {
        let list = try await attachments(table, id: id)
        guard let attachment = list.first(where: { $0.name == name && $0.state != .pendingDelete }) else {
            let names = list.filter { $0.state != .pendingDelete }.map { "'\($0.name)'" }
            throw ClientError(
                .notFound, "'\(table)/\(id)' has no attachment '\(name)'",
                hint: names.isEmpty ? "it has none" : "it has \(names.joined(separator: ", "))")
        }
        let handle = await prepared().table(table)
        if attachment.isLocal, await attachmentFiles?.url(sha256: attachment.sha256) != nil {
            let url = try await handle.openAttachment(of: id, name: name)
            return AttachmentFile(url: url, attachment: attachment, downloaded: false)
        }
        let missing = "attachment '\(name)' of '\(table)/\(id)' (\(Self.bytes(attachment.size))) is not on this device"
        if server == nil, connectivity.inner == nil {
            throw ClientError(.unreachable, missing, hint: "give --server URL to download it")
        }
        if !isOnline { throw ClientError(.unreachable, missing, hint: "say `online` to download it") }
        let url: URL
        do {
            url = try await handle.openAttachment(of: id, name: name)
        } catch {
            guard error.code == .network else { throw error }
            throw ClientError(
                .unreachable, missing + ", and the server cannot be reached: \(error.message)",
                hint: ClientError.networkHint(error.remoteError))
        }
        return AttachmentFile(url: url, attachment: attachment, downloaded: true)
    }

    /// Removes an attachment and queues its delete on the server; answers whether a delete was
    /// queued (an attachment of an item the server never saw just goes).
    ///
    /// - Throws: `ClientError` `.notFound` (no such item or attachment).
    @discardableResult
    public func removeAttachment(_ table: String, id: String, name: String) async throws -> Bool {
        let list = try await attachments(table, id: id)
        guard list.contains(where: { $0.name == name && $0.state != .pendingDelete }) else {
            throw ClientError(
                .notFound, "'\(table)/\(id)' has no attachment '\(name)'",
                hint: "`attachments list \(table) \(id)` lists them")
        }
        let handle = await prepared().table(table)
        try await handle.removeAttachment(of: id, name: name)
        return try await handle.attachments(of: id).contains { $0.name == name && $0.state == .pendingDelete }
    }

    /// How many attachment uploads and deletes wait for a push.
    public func queuedAttachmentCount() async throws -> Int {
        guard attachmentFiles != nil else { return 0 }
        return try await prepared().queuedAttachments().count
    }

    /// A media type for common file name extensions, else `nil` (the server then stores
    /// `application/octet-stream`).
    static func contentType(of file: URL) -> String? {
        let types = [
            "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp",
            "heic": "image/heic", "pdf": "application/pdf", "txt": "text/plain", "md": "text/markdown",
            "json": "application/json", "csv": "text/csv", "html": "text/html", "mp3": "audio/mpeg",
            "m4a": "audio/mp4", "mp4": "video/mp4", "mov": "video/quicktime", "zip": "application/zip",
        ]
        return types[file.pathExtension.lowercased()]
    }

    /// `5.2 MB`, `812 KB`, `12 bytes`.
    public static func bytes(_ count: Int64) -> String {
        if count < 1_000 { return "\(count) byte\(count == 1 ? "" : "s")" }
        if count < 1_000_000 { return String(format: "%.0f KB", Double(count) / 1_000) }
        if count < 1_000_000_000 { return String(format: "%.1f MB", Double(count) / 1_000_000) }
        return String(format: "%.2f GB", Double(count) / 1_000_000_000)
    }
}

/// What ``Device/attachmentFile(_:id:name:)`` found.
public struct AttachmentFile: Sendable {
    /// The file, in the attachments directory: read it, do not change it.
    public var url: URL
    /// The attachment.
    public var attachment: ItemAttachment
    /// Whether it was downloaded just now.
    public var downloaded: Bool
}

extension StoreLocation {
    /// Where a file store keeps its attachment files: `<path>.attachments` beside it; `nil` for
    /// `memory` (its device uses a temporary directory).
    public var attachmentsDirectory: URL? {
        switch self {
        case .sqlite(let path), .lmdb(let path): URL(fileURLWithPath: path + ".attachments")
        case .memory: nil
        }
    }
}

/// Transport's `DiskAttachmentFiles` in a directory made only when a file is first stored: a
/// store that never holds an attachment gets no directory beside it.
final class StoreAttachmentFiles: AttachmentFiles {
    let directory: URL
    private let opened = Mutex<DiskAttachmentFiles?>(nil)

    init(_ directory: URL) { self.directory = directory }

    /// A fresh temporary directory (a memory store's).
    static func temporary() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("ferry-attachments-" + UUID().uuidString)
    }

    private var exists: Bool { FileManager.default.fileExists(atPath: directory.path) }

    private func files() throws -> DiskAttachmentFiles {
        try opened.withLock { opened in
            if let opened { return opened }
            let files = try DiskAttachmentFiles(directory: directory)
            opened = files
            return files
        }
    }

    /// Removes the directory (a memory store's, when its device closes).
    func removeDirectory() { try? FileManager.default.removeItem(at: directory) }

    func importFile(at source: URL, moving: Bool) async throws -> ImportedFile {
        try await files().importFile(at: source, moving: moving)
    }

    func url(sha256: String) async -> URL? {
        guard exists, let files = try? files() else { return nil }
        return await files.url(sha256: sha256)
    }

    func remove(sha256: String) async throws {
        guard exists else { return }
        try await files().remove(sha256: sha256)
    }

    func size(sha256: String) async throws -> Int64? {
        guard exists else { return nil }
        return try await files().size(sha256: sha256)
    }

    func temporaryURL() async throws -> URL { try await files().temporaryURL() }

    func discardTemporary(_ url: URL) async {
        guard let files = try? files() else { return }
        await files.discardTemporary(url)
    }

    func storedContents() async throws -> [StoredContent] {
        guard exists else { return [] }
        return try await files().storedContents()
    }

    func holdsIntact(sha256: String) async throws -> Bool {
        guard exists else { return false }
        return try await files().holdsIntact(sha256: sha256)
    }
}
