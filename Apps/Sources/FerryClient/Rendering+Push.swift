import FerryConsole
public import SyncCore

// What a push printed: its counts, its failures, and the conflicts its handler settled.
extension Rendering {
    /// A push's outcome.
    ///
    /// `files` are the attachment transfers (uploads and deletes) the push sent of those queued
    /// before it; left out when none were queued. `bases` are the versions the failed changes were
    /// made from (``Device/conflictBases()``): a conflict then shows what each side changed, as
    /// `conflicts` does.
    public static func push(
        _ result: PushResult, files: (sent: Int, queued: Int)? = nil, bases: [Int64: JSONObject] = [:],
        format: OutputFormat, width: Int? = nil
    ) -> String {
        let files = files.flatMap { $0.queued > 0 ? $0 : nil }
        // What reached the server: a conflict settled for the server sent nothing (the library's
        // `pushed` counts it, as an operation the push is done with; "pushed 1" misled scripts).
        let pushed = result.pushed - result.resolvedConflicts.filter { $0.resolution == .useServer }.count
        switch format {
        case .json, .jsonLines:
            var object: JSONObject = [
                "pushed": .int(Int64(pushed)), "failed": .array(result.failed.map { .object($0.json) }),
            ]
            if let files {
                var counts: JSONObject = ["sent": .int(Int64(files.sent)), "queued": .int(Int64(files.queued))]
                if !result.attachmentsDropped.isEmpty {
                    counts["dropped"] = .int(Int64(result.attachmentsDropped.count))
                }
                if !result.attachmentsSuperseded.isEmpty {
                    counts["superseded"] = .int(Int64(result.attachmentsSuperseded.count))
                }
                object["files"] = .object(counts)
            }
            if !result.resolvedConflicts.isEmpty {
                object["resolvedConflicts"] = resolvedConflictsJSON(result.resolvedConflicts)
            }
            return JSONValue.object(object).serialized()
        case .table, .csv:
            var text = "pushed \(grouped(pushed)) operation\(pushed == 1 ? "" : "s")"
            text += resolvedConflicts(result.resolvedConflicts)
            if !result.failed.isEmpty {
                text +=
                    "; \(grouped(result.failed.count)) failed (see `conflicts`):\n"
                    + errors(result.failed, bases: bases, format: .table, width: width)
            }
            if let files {
                text +=
                    "\nsent \(grouped(files.sent)) of \(grouped(files.queued)) queued file\(files.queued == 1 ? "" : "s") (attachments)"
                let dropped = result.attachmentsDropped.count
                if dropped > 0 {
                    text +=
                        "; dropped \(grouped(dropped)): \(dropped == 1 ? "its item was" : "their items were") deleted"
                }
                let superseded = result.attachmentsSuperseded.count
                if superseded > 0 {
                    text +=
                        "; \(grouped(superseded)) not deleted: another device replaced \(superseded == 1 ? "it" : "them") since (the next pull brings \(superseded == 1 ? "it" : "them") back)"
                }
            }
            return text
        }
    }

    /// `[{"table":…,"id":…,"operation":…,"took":"server"|"mine"|"merged"}]`.
    static func resolvedConflictsJSON(_ conflicts: [ResolvedConflict]) -> JSONValue {
        .array(
            conflicts.map { conflict in
                [
                    "table": .string(conflict.table), "id": .string(conflict.itemID),
                    "operation": .string(conflict.kind.rawValue),
                    "took": .string(Self.took(conflict.resolution)),
                ]
            })
    }

    static func took(_ resolution: ConflictResolution) -> String {
        switch resolution {
        case .useServer: "server"
        case .useMerged: "merged"
        default: "mine"
        }
    }

    /// The lines saying which conflicts a push settled by itself, and which local changes that
    /// dropped: the server's copy winning must never pass for a plain "pushed".
    static func resolvedConflicts(_ conflicts: [ResolvedConflict]) -> String {
        guard !conflicts.isEmpty else { return "" }
        let dropped = conflicts.filter { $0.resolution == .useServer }
        var text = ""
        if !dropped.isEmpty {
            let count = dropped.count
            text +=
                "\n\(grouped(count)) conflict\(count == 1 ? "" : "s") settled for the server: "
                + "the server's copy replaced \(count == 1 ? "this local change" : "these local changes"), "
                + "which \(count == 1 ? "is" : "are") not on the server:"
            for conflict in dropped.prefix(20) {
                text += "\n  \(conflict.kind) \(TextTable.clean(conflict.table))/\(TextTable.clean(conflict.itemID))"
            }
            if count > 20 { text += "\n  … and \(grouped(count - 20)) more" }
        }
        let merged = conflicts.filter { if case .useMerged = $0.resolution { true } else { false } }.count
        let kept = conflicts.count - dropped.count - merged
        if kept > 0 {
            text +=
                "\n\(grouped(kept)) conflict\(kept == 1 ? "" : "s") settled for this device: "
                + "\(kept == 1 ? "its change was" : "their changes were") sent again over the server's"
        }
        if merged > 0 {
            text +=
                "\n\(grouped(merged)) conflict\(merged == 1 ? "" : "s") merged: "
                + "\(merged == 1 ? "the local change was" : "the local changes were") merged with the server's "
                + "copy and sent"
        }
        return text
    }
}
