// The store transactions of attachment sync (AttachmentSync.swift): pulled rows applied, the cache evicted.

/// The store side of applying pulled attachment rows.
enum AttachmentPull {
    /// Applies server rows to `__attachments`; returns the contents no row keeps a file of any more.
    static func apply(_ rows: [JSONObject], table: String, in tx: any StoreTransaction) throws -> Set<String> {
        var released: Set<String> = []
        var sequence = try AttachmentQueue.nextSequence(in: tx)
        for row in rows {
            guard let itemID = row["item"]?.stringValue, let name = row["name"]?.stringValue,
                (try? AttachmentName.validate(name)) != nil
            else { continue }
            let deleted = row["deleted"]?.boolValue ?? false
            let existing = try AttachmentQueue.find(table: table, itemID: itemID, name: name, in: tx)
            if let existing, existing.attachment.state.isQueued { continue }  // the local change goes first
            if deleted {
                guard let existing else { continue }
                try tx.delete(AttachmentQueue.table, ids: [existing.id])
                if existing.attachment.state.hasLocalFile { released.insert(existing.attachment.sha256) }
                continue
            }
            guard let sha256 = row["sha256"]?.stringValue, let size = row["size"]?.intValue else { continue }
            var attachment =
                existing?.attachment
                ?? ItemAttachment(
                    table: table, itemID: itemID, name: name, sha256: sha256, size: size, state: .remote,
                    lastUsed: ItemFields.now(), sequence: sequence)
            if existing == nil { sequence += 1 }
            if attachment.sha256 != sha256 {
                if attachment.state.hasLocalFile { released.insert(attachment.sha256) }
                attachment.sha256 = sha256
                attachment.state = .remote
            }
            attachment.size = size
            attachment.contentType = row["contentType"]?.stringValue
            try AttachmentQueue.save(attachment, in: tx)
        }
        return released.filter { (try? AttachmentQueue.contentInUse($0, except: nil, in: tx)) == false }
    }
}

/// The cache's eviction in the store.
enum AttachmentCache {
    /// Marks the least recently used synced, unpinned contents `remote` until the rest fit `limit`;
    /// returns the contents whose files can go.
    static func evict(limit: Int64, in tx: any StoreTransaction) throws -> [String] {
        let all = try AttachmentQueue.rows(tx, nil).map(\.attachment)
        // A content that a pending upload or a pinned row keeps is never evicted, nor counted.
        let kept = Set(all.filter { $0.state == .pendingUpload || ($0.pinned && $0.state.hasLocalFile) }.map(\.sha256))
        var candidates: [String: (size: Int64, lastUsed: Timestamp)] = [:]
        for attachment in all where attachment.state.isEvictable && !kept.contains(attachment.sha256) {
            let previous = candidates[attachment.sha256]
            candidates[attachment.sha256] = (
                attachment.size, max(previous?.lastUsed ?? attachment.lastUsed, attachment.lastUsed)
            )
        }
        var total = candidates.values.reduce(0) { $0 + $1.size }
        guard total > limit else { return [] }
        var victims: [String] = []
        for (sha256, entry) in candidates.sorted(by: { ($0.value.lastUsed, $0.key) < ($1.value.lastUsed, $1.key) }) {
            guard total > limit else { break }
            victims.append(sha256)
            total -= entry.size
        }
        let evicted = Set(victims)
        for attachment in all where evicted.contains(attachment.sha256) && attachment.state.isEvictable {
            var attachment = attachment
            attachment.state = .remote
            try AttachmentQueue.save(attachment, in: tx)
        }
        return victims
    }
}
