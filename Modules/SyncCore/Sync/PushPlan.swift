extension SyncContext {
    /// What this push may use of the backend.
    struct PushPlan: Sendable {
        var capabilities: RemoteWriteCapabilities
        /// `ferry-<device>-`: the keys of this store's attempts, when the backend honours keys.
        var keyPrefix: String?
        /// The operations with a recorded error: read once when the push starts, and added to as
        /// operations fail. Completing a batch removes the errors of these only (it read every
        /// error of the store once per batch, which grew with the errors a queue held).
        var erroredOperations: Set<Int64> = []
        /// The items this push took off the device, by table (their deletes applied by the server,
        /// or removed here because the server had deleted them): their synced files are freed when
        /// the operations are done (``freeFilesOfDeletedItems()``).
        var deletedItems: [String: [String]] = [:]

        /// Notes an operation the server applied (a delete's item has files to free).
        mutating func applied(_ operation: QueuedOperation) {
            if operation.kind == .delete { removed(operation) }
        }

        /// Notes that the item of `operation` left the device.
        mutating func removed(_ operation: QueuedOperation) {
            deletedItems[operation.table, default: []].append(operation.itemID)
        }

        func key(_ operation: QueuedOperation) -> String? {
            keyPrefix.map { "\($0)\(operation.id)-\(operation.attempts)" }
        }
    }

    /// Frees the synced files of the attachments of the items this push deleted on the server, as
    /// a pull frees those of items another device deleted: their rows stay, `remote`, for an
    /// undelete. Before, a device kept the files of the items it deleted until the cache evicted
    /// them.
    func freeFilesOfDeletedItems() async {
        let deleted = pushPlan.deletedItems
        pushPlan.deletedItems = [:]
        for (table, itemIDs) in deleted.sorted(by: { $0.key < $1.key }) {
            await freeAttachmentFiles(ofMany: itemIDs, table: table)
        }
    }

    /// What is sent for `attempt`, with its key when the backend honours keys.
    func remoteWrite(_ attempt: PushSteps.Attempt) -> RemoteWrite {
        RemoteWrite(
            table: attempt.operation.table, kind: attempt.operation.kind, itemID: attempt.operation.itemID,
            body: attempt.body, ifVersion: attempt.precondition, idempotencyKey: pushPlan.key(attempt.operation))
    }

    /// `ferry-<device>-`: this store's device id, made once and kept in the store.
    func idempotencyKeyPrefix() async throws -> String {
        if let deviceIdentifier { return "ferry-\(deviceIdentifier)-" }
        let made = try await write("push") { tx in
            if let kept = try tx.deltaToken(table: Self.engineSlot, queryID: "deviceID") { return kept }
            let id = ItemID.generate()
            try tx.setDeltaToken(table: Self.engineSlot, queryID: "deviceID", value: id)
            return id
        }
        deviceIdentifier = made
        return "ferry-\(made)-"
    }

    /// Where the engine keeps its own values in a store's delta-token slots (no table has this name).
    static let engineSlot = "$ferry"
}
