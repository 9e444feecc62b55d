import Foundation
import Logging
import ServerStorageCore
import ServiceLifecycle

/// The server's housekeeping of attachment content: every ``AttachmentLimits/sweepInterval`` it
/// removes the uploads nobody continued for ``AttachmentLimits/uploadExpiry`` (their bytes with
/// them), then the content no attachment has named for ``AttachmentLimits/retention``. One task
/// per server; it stops at the graceful shutdown.
///
/// Content is collected when it is older than the retention and every attachment that named it
/// was removed longer ago than that (or purged with its item). The check and the deletion hold the
/// server's content gate and the storage's ``StorageLock/attachmentRoom``, which an upload's
/// completion holds too while it records its attachment, in every instance: content is never
/// collected between the check and an attachment recorded to name it. A completion that comes
/// after the content was collected finds it gone and asks the client to upload again.
struct AttachmentSweeper: Service {
    let blobs: any BlobStorage
    let limits: AttachmentLimits
    let logger: Logger
    /// Where attachments are recorded; `nil` leaves content alone (only uploads expire).
    var index: AttachmentIndex?
    /// Held while content is checked and deleted (the completion of uploads holds it too).
    var gate = TurnGate()

    /// How many blobs one listing reads.
    static let page = 500

    func run() async throws {
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: limits.sweepInterval) }
            } catch {
                return
            }
            if Task.isCancelled || Task.isShuttingDownGracefully { return }
            await sweep()
        }
    }

    /// One pass: the expired uploads, then the content nothing names. Failures are logged; the
    /// next pass tries again.
    func sweep(now: Date = Date()) async {
        let expiry = Double(limits.uploadExpiry.components.seconds)
        do {
            let removed = try await blobs.expireUploads(inactiveSince: now.addingTimeInterval(-expiry))
            if removed > 0 { logger.info("removed \(removed) expired attachment uploads") }
        } catch {
            logger.warning("the attachment sweep failed: \(error)")
        }
        guard let index else { return }
        do {
            let (count, bytes) = try await collect(index, now: now)
            if count > 0 { logger.info("removed \(count) attachment contents no attachment names (\(bytes) bytes)") }
        } catch {
            logger.warning("the collection of attachment content failed: \(error)")
        }
    }

    /// Deletes the content no attachment has named for the retention; answers how many blobs and
    /// bytes.
    func collect(_ index: AttachmentIndex, now: Date) async throws -> (count: Int, bytes: Int64) {
        let cutoff = now.addingTimeInterval(-Double(limits.retention.components.seconds))
        let cutoffMilliseconds = Int64((cutoff.timeIntervalSince1970 * 1000).rounded())
        var (count, bytes): (Int, Int64) = (0, 0)
        var after: String?
        while case let page = try await blobs.blobs(after: after, limit: Self.page), !page.isEmpty {
            after = page.last?.sha256
            for blob in page where blob.createdAt < cutoff {
                try await gate.enter(within: nil) { CancellationError() }
                defer { gate.leave() }
                // Another instance's completion could otherwise record an attachment naming the
                // content between the check and the deletion, and name deleted content.
                let deleted = try await index.storage.exclusiveTransaction(.attachmentRoom) { [blobs] in
                    switch try await index.reference(to: blob.sha256) {
                    case .attached: return false
                    case .removed(let at) where at >= cutoffMilliseconds: return false
                    case .removed, .none: return try await blobs.deleteBlob(sha256: blob.sha256)
                    }
                }
                if deleted {
                    count += 1
                    bytes += blob.size
                }
            }
        }
        return (count, bytes)
    }
}
