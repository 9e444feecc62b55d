import Foundation
import Logging
import ServerStorageCore
import ServiceLifecycle

/// The server's housekeeping of attachment content: every ``AttachmentLimits/sweepInterval`` it
/// removes the uploads nobody continued for ``AttachmentLimits/uploadExpiry`` (their bytes with
/// them). One task per server; it stops at the graceful shutdown.
struct AttachmentSweeper: Service {
    let blobs: any BlobStorage
    let limits: AttachmentLimits
    let logger: Logger

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

    /// One pass: the expired uploads. Failures are logged; the next pass tries again.
    func sweep(now: Date = Date()) async {
        let expiry = Double(limits.uploadExpiry.components.seconds)
        do {
            let removed = try await blobs.expireUploads(inactiveSince: now.addingTimeInterval(-expiry))
            if removed > 0 { logger.info("removed \(removed) expired attachment uploads") }
        } catch {
            logger.warning("the attachment sweep failed: \(error)")
        }
    }
}
