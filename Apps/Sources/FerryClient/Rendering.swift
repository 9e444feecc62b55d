import FerryConsole
import Foundation
public import SyncCore

/// How results are printed: readable tables, one JSON document, or, for lists of items, CSV or
/// JSON lines (one item per line); other results print as a table (csv) or JSON (jsonl) then.
public enum OutputFormat: String, Sendable, Hashable, CaseIterable {
    case table, json, csv
    case jsonLines = "jsonl"

    /// Whether results are JSON (`json` or `jsonl`).
    public var isJSON: Bool { self == .json || self == .jsonLines }
}

/// Turns command results into text.
///
/// ```swift
/// print(Rendering.items(result.items, count: result.totalCount, format: .table))
/// ```
public enum Rendering: Sendable {
    /// The system properties, shown after the app's fields.
    public static let systemColumns = ["updatedAt", "version", "deleted", "createdAt"]

    /// Items as a table (id first, then the app's fields, then the system properties; or the
    /// `columns` given, in their order) or a JSON array (`{"items": [...], "count": N}` when a count
    /// was asked for). `width` fits the table to a terminal; `expanded` prints a block per item.
    public static func items(
        _ items: [JSONObject], count: Int? = nil, format: OutputFormat, columns given: [String]? = nil,
        width: Int? = nil, expanded: Bool = false
    ) -> String {
        switch format {
        case .json:
            if let count {
                return JSONValue.object(["items": .array(items.map(JSONValue.object)), "count": .int(Int64(count))])
                    .serialized()
            }
            return JSONValue.array(items.map(JSONValue.object)).serialized()
        case .jsonLines:
            return items.map { JSONValue.object($0).serialized() }.joined(separator: "\n")
        case .csv:
            let columns = given ?? defaultColumns(items)
            var lines = [columns.map(csvField).joined(separator: ",")]
            for item in items {
                lines.append(columns.map { field in csvField(csvText(item[field])) }.joined(separator: ","))
            }
            return lines.joined(separator: "\n")
        case .table:
            guard !items.isEmpty else { return count.map { "(no items; \($0) in all)" } ?? "(no items)" }
            let columns = given ?? defaultColumns(items)
            let rows = items.map { item in columns.map { cell(item[$0]) } }
            var text =
                expanded
                ? TextTable.renderExpanded(headers: columns, rows: rows, totalWidth: width)
                : TextTable.render(headers: columns, rows: rows, totalWidth: width)
            let shown = "\(items.count) item\(items.count == 1 ? "" : "s")"
            text += "\n" + (count.map { "\(shown) of \($0)" } ?? shown)
            return text
        }
    }

    /// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
    static func csvField(_ text: String) -> String {
        guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" || $0 == "\r\n" }) else {
            return text
        }
        return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// A value as CSV text: strings as they are, `null` and absent fields empty, the rest as JSON.
    static func csvText(_ value: JSONValue?) -> String {
        switch value {
        case nil, .null?: ""
        case .string(let text)?: text
        case let other?: other.serialized()
        }
    }

    /// Every field the items have: `id`, the app's fields by name, then the system properties.
    public static func defaultColumns(_ items: [JSONObject]) -> [String] {
        var keys = Set<String>()
        for item in items { keys.formUnion(item.keys) }
        let fields = keys.subtracting(["id"] + systemColumns).sorted()
        let system = systemColumns.filter(keys.contains)
        return (keys.contains("id") ? ["id"] : []) + fields + system
    }

    /// One item, or a note that there is none.
    public static func item(_ item: JSONObject?, format: OutputFormat, width: Int? = nil) -> String {
        guard let item else { return format.isJSON ? "null" : "(no such item)" }
        if format == .csv { return items([item], format: .csv) }
        return format.isJSON ? JSONValue.object(item).serialized() : items([item], format: .table, width: width)
    }

    /// A pull's outcome; `bases` as in ``push(_:files:bases:format:width:)``, for the failures of the
    /// push that ran first.
    public static func pull(
        _ result: PullResult, table: String, bases: [Int64: JSONObject] = [:], format: OutputFormat, width: Int? = nil
    ) -> String {
        let items = result.items
        switch format {
        case .json, .jsonLines:
            var object: JSONObject = [
                "table": .string(table), "pages": .int(Int64(result.pages)), "received": .int(Int64(items.received)),
                "upserted": .int(Int64(items.upserted)), "deleted": .int(Int64(items.deleted)),
                "skipped": .int(Int64(items.skipped)), "invalid": .int(Int64(items.invalid)),
            ]
            if let push = result.push { object["pushedFirst"] = .int(Int64(push.pushed)) }
            if let conflicts = result.push?.resolvedConflicts, !conflicts.isEmpty {
                object["resolvedConflicts"] = resolvedConflictsJSON(conflicts)
            }
            object["failed"] = .array((result.push?.failed ?? []).map { .object($0.json) })
            return JSONValue.object(object).serialized()
        case .table, .csv:
            var text =
                "pulled \(grouped(items.received)) item\(items.received == 1 ? "" : "s") of '\(table)' in "
                + "\(grouped(result.pages)) page\(result.pages == 1 ? "" : "s"): \(grouped(items.upserted)) written, "
                + "\(grouped(items.deleted)) deleted"
            if items.skipped > 0 {
                text += ", \(grouped(items.skipped)) left as they are (local changes, or a newer copy here)"
            }
            if items.invalid > 0 { text += ", \(grouped(items.invalid)) ignored (invalid id, version or deleted)" }
            // The rest are the server's deletions of items this device never had (or had removed):
            // counted nowhere, they left "3 items: 2 written, 0 deleted" unexplained.
            let absent = items.received - items.upserted - items.deleted - items.skipped - items.invalid
            if absent > 0 {
                text += ", \(grouped(absent)) deletion\(absent == 1 ? "" : "s") of items not on this device"
            }
            if let push = result.push, push.pushed > 0 || !push.failed.isEmpty {
                text = "pushed \(grouped(push.pushed)) first; " + text
            }
            text += resolvedConflicts(result.push?.resolvedConflicts ?? [])
            if let failed = result.push?.failed, !failed.isEmpty {
                text +=
                    "\n\(failed.count) operation\(failed.count == 1 ? "" : "s") of the push first failed (see `conflicts`):\n"
                    + errors(failed, bases: bases, format: .table, width: width)
            }
            return text
        }
    }

    /// The errors table; `expanded` prints a block per error with its message whole. On a terminal
    /// (`width`) the table fits it, and says so when a message was cut.
    public static func errors(
        _ errors: [OperationErrorRecord], bases: [Int64: JSONObject] = [:], format: OutputFormat, width: Int? = nil,
        expanded: Bool = false
    ) -> String {
        switch format {
        case .json, .jsonLines:
            return JSONValue.array(errors.map { .object($0.json) }).serialized()
        case .table, .csv:
            guard !errors.isEmpty else { return "(no conflicts or failed operations)" }
            let headers = ["error", "table", "item", "operation", "status", "message"]
            let rows = errors.map { error in
                [
                    error.id, error.table, error.itemID, error.kind.rawValue, error.statusCode.map(String.init) ?? "-",
                    error.message,
                ]
            }
            var text: String
            if expanded {
                text = TextTable.renderExpanded(headers: headers, rows: rows, totalWidth: nil)
            } else {
                text = TextTable.render(headers: headers, rows: rows, totalWidth: width)
                if TextTable.cutsCells(headers: headers, rows: rows, totalWidth: width) {
                    let note = "(cut to fit: `conflicts -x` shows each error whole)"
                    text += "\n" + wrapped(note, width: width ?? note.count).joined(separator: "\n")
                }
            }
            for error in errors where error.clientItem != nil || error.serverItem != nil {
                text += "\n\n" + conflict(error, base: bases[error.operationID], width: expanded ? nil : width)
            }
            return text
        }
    }

    /// `3 items`, or `{"count":3}`: what `query --count` prints.
    public static func count(_ count: Int, format: OutputFormat) -> String {
        switch format {
        case .json, .jsonLines: JSONValue.object(["count": .int(Int64(count))]).serialized()
        case .csv: "count\n\(count)"
        case .table: "\(grouped(count)) item\(count == 1 ? "" : "s")"
        }
    }

    /// Whether the items table at `width` cuts a cell (then `query` says how to see it whole).
    public static func cutsCells(_ items: [JSONObject], columns given: [String]?, width: Int) -> Bool {
        let columns = given ?? defaultColumns(items)
        let rows = items.map { item in columns.map { cell(item[$0]) } }
        return TextTable.cutsCells(headers: columns, rows: rows, totalWidth: width)
    }

    /// The base (what the device last had from the server), mine and the server's item side by
    /// side, field by field; `≠` marks the fields where mine and the server's differ, and "changed
    /// by" says which side moved away from the base. Without a base (an insert) the view has two
    /// columns.
    ///
    /// ```
    /// todo/milk (update, 412)
    ///    field  base  mine            server's  changed by
    ///    ─────  ────  ──────────────  ────────  ──────────
    /// ≠  title  Milk  Milk, 2 litres  Oat milk  both
    ///    done   true  false           false     both
    /// ```
    ///
    /// A refusal that carries no server item (a 400, a 5xx) says nothing of the server's copy: the
    /// view shows the base and mine, `≠` marking the fields this change sets, instead of a server
    /// column of "(none)" that reads as a server without the item. A 404 or 410 does say the server
    /// has none, and keeps its column.
    public static func conflict(_ error: OperationErrorRecord, base: JSONObject? = nil, width: Int? = nil) -> String {
        let mine = error.clientItem ?? [:]
        let server = error.serverItem ?? [:]
        let system: Set<String> = ["id", "updatedAt", "version", "deleted", "createdAt"]
        let serverKnown = error.serverItem != nil || [404, 410].contains(error.statusCode ?? 0)
        let fields = Set(mine.keys).union(server.keys).union(base?.keys ?? [:].keys).subtracting(system).sorted()
        let rows = fields.map { field in
            guard serverKnown else {
                let changed = base.map { mine[field] != $0[field] } ?? false
                return [changed ? "≠" : "", field] + (base.map { [cellOrAbsent($0[field], $0)] } ?? [])
                    + [cellOrAbsent(mine[field], error.clientItem)]
            }
            var row = [mine[field] == server[field] ? "" : "≠", field]
            if let base { row.append(cellOrAbsent(base[field], base)) }
            row += [cellOrAbsent(mine[field], error.clientItem), cellOrAbsent(server[field], error.serverItem)]
            if let base {
                let mineChanged = error.clientItem != nil && mine[field] != base[field]
                let serverChanged = error.serverItem != nil && server[field] != base[field]
                let changedBy: String =
                    switch (mineChanged, serverChanged) {
                    case (true, true): "both"
                    case (true, false): "mine"
                    case (false, true): "server"
                    case (false, false): ""
                    }
                row.append(changedBy)
            }
            return row
        }
        let status = error.statusCode.map { ", \($0)" } ?? ""
        let heading = "\(error.table)/\(error.itemID) (\(error.kind.rawValue)\(status))"
        let mineVersion = "mine from version \(mine["version"]?.stringValue ?? "-")"
        let versions =
            serverKnown
            ? mineVersion + ", the server's at \(server["version"]?.stringValue ?? "-")"
            : mineVersion + " (the server refused the change; its copy was not sent)"
        let headers: [String] =
            switch (serverKnown, base != nil) {
            case (true, true): ["", "field", "base", "mine", "server's", "changed by"]
            case (true, false): ["", "field", "mine", "server's"]
            case (false, true): ["", "field", "base", "mine"]
            case (false, false): ["", "field", "mine"]
            }
        let title =
            width.map { heading.count + versions.count + 2 > $0 } == true
            ? heading + "\n" + versions : heading + ": " + versions
        return title + "\n" + TextTable.render(headers: headers, rows: rows, totalWidth: width)
    }

    private static func cellOrAbsent(_ value: JSONValue?, _ item: JSONObject?) -> String {
        guard item != nil else { return "(none)" }
        return value.map { cell($0) } ?? "(absent)"
    }

    /// Up to this many queued operations, `status` lists each; beyond, it counts them.
    public static let operationListLimit = 20

    /// `12,345`: a count with its thousands grouped.
    public static func grouped(_ number: Int) -> String {
        let digits = String(number.magnitude)
        var result = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { result += "," }
            result.append(digit)
        }
        return number < 0 ? "-" + result : result
    }

    /// "everything synced (last sync 2 s ago)", or what says that nothing waits when it never synced.
    static func synced(_ last: Timestamp?, now: Timestamp) -> String {
        guard let last else { return "nothing waiting to be pushed (never synced with a server)" }
        return "everything synced (last sync \(ago(from: last, to: now)))"
    }

    /// Nothing queued, on a device without a server to ask whether anything changed there.
    static func unasked(_ last: Timestamp?, now: Timestamp) -> String {
        "nothing waiting to be pushed (no server given to ask; "
            + (last.map { "last sync \(ago(from: $0, to: now)))" } ?? "never synced with a server)")
    }

    /// "2 s ago", "5 min ago", "3 h ago", "4 days ago".
    static func ago(from then: Timestamp, to now: Timestamp) -> String {
        let seconds = max(0, (now.millisecondsSince1970 - then.millisecondsSince1970) / 1000)
        switch seconds {
        case ..<60: return "\(seconds) s ago"
        case ..<3_600: return "\(seconds / 60) min ago"
        case ..<86_400: return "\(seconds / 3_600) h ago"
        default: return "\(seconds / 86_400) day\(seconds >= 2 * 86_400 ? "s" : "") ago"
        }
    }

    /// `status`.
    public static func status(
        _ status: DeviceStatus, format: OutputFormat, now: Timestamp? = nil, width: Int? = nil
    ) -> String {
        let now = now ?? Timestamp(millisecondsSince1970: Int64(Date().timeIntervalSince1970 * 1000))
        switch format {
        case .json, .jsonLines:
            let queued = status.queued.mapValues { JSONValue.int(Int64($0)) }
            let tokens = status.deltaTokens.mapValues { entries in JSONValue.object(entries.mapValues(JSONValue.string))
            }
            return JSONValue.object([
                "device": .string(status.device), "store": .string(status.store), "online": .bool(status.online),
                "server": status.server.map(JSONValue.string) ?? .null,
                "reachable": status.reachability.map { .bool($0.isReachable) } ?? .null,
                "unreachableReason": status.reachability.flatMap(Self.unreachableReason).map(JSONValue.string) ?? .null,
                "queued": .object(queued), "errors": .array(status.errors.map { .object($0.json) }),
                "queuedAttachments": .int(Int64(status.queuedAttachments)),
                "deltaTokens": .object(tokens),
                "lastSyncedAt": status.lastSyncedAt.map { .string($0.iso8601) } ?? .null,
                "unfinishedPulls": .array(status.unfinishedPulls.map(JSONValue.string)),
                "automaticSync": status.automaticTables.map { .array($0.map(JSONValue.string)) } ?? .null,
                "syncSummary": status.sync.map { .string($0.summary) } ?? .null,
            ]).serialized()
        case .table, .csv:
            var lines = [
                "device \(status.device) (\(status.store)), \(status.online ? "online" : "offline"); "
                    + "\(grouped(status.operations.count)) queued operation\(status.operations.count == 1 ? "" : "s"), "
                    + "\(grouped(status.errors.count)) error\(status.errors.count == 1 ? "" : "s")"
            ]
            if let server = status.server {
                switch status.reachability {
                case nil: lines.append("server \(server): not asked (offline)")
                case .reachable?, .unknown?: lines.append("server \(server): reachable")
                case .unreachable(let since, let reason)?:
                    // Automatic sync knows since when; a status taken once only knows it now.
                    let when = status.sync == nil ? "" : " since \(Self.ago(from: since, to: now))"
                    // A refused token is an answer: the server is there, the credentials are not right.
                    let state =
                        reason.code == .unauthorized || reason.status == 403
                        ? "refuses the token"
                        : reason.status == 404 ? "is no table-protocol server" : "unreachable"
                    lines.append("server \(server): \(state)\(when): \(reason.message)")
                }
            }
            // "everything synced" only when the server answers: without one nothing was asked.
            let reachable = status.reachability?.isReachable == true
            let files = status.queuedAttachments
            if files > 0 {
                lines[0] += "; \(grouped(files)) file\(files == 1 ? "" : "s") waiting to be sent (attachments)"
            } else if status.operations.isEmpty && status.errors.isEmpty {
                lines[0] +=
                    ": "
                    + (!status.unfinishedPulls.isEmpty
                        ? "nothing queued, but the last pull of "
                            + status.unfinishedPulls.map { "'\($0)'" }.joined(separator: ", ")
                            + " stopped before its end (pull again to finish it)"
                        : reachable
                            ? Self.synced(status.lastSyncedAt, now: now)
                            : status.server == nil ? Self.unasked(status.lastSyncedAt, now: now) : "nothing queued")
            }
            if let tables = status.automaticTables {
                let summary = status.sync.map { " (\($0.summary))" } ?? ""
                lines.append("syncing automatically: \(tables.joined(separator: ", "))\(summary)")
            }
            if let width { lines = lines.flatMap { Self.wrapped($0, width: width) } }
            if status.operations.count > Self.operationListLimit {
                // Many (after an import): a count per table, operation and state, not a line each.
                var counts: [[String]: Int] = [:]
                for operation in status.operations {
                    counts[[operation.table, operation.kind.rawValue, Self.words(operation.state)], default: 0] += 1
                }
                let rows = counts.sorted { $0.key.lexicographicallyPrecedes($1.key) }.map {
                    $0.key + [grouped($0.value)]
                }
                lines.append(
                    TextTable.render(headers: ["table", "operation", "state", "count"], rows: rows, totalWidth: width))
            } else if !status.operations.isEmpty {
                let rows = status.operations.map {
                    [String($0.id), $0.table, $0.itemID, $0.kind.rawValue, Self.words($0.state)]
                }
                lines.append(
                    TextTable.render(
                        headers: ["#", "table", "item", "operation", "state"], rows: rows, totalWidth: width))
            }
            if !status.deltaTokens.isEmpty {
                var rows: [[String]] = []
                for (table, entries) in status.deltaTokens.sorted(by: { $0.key < $1.key }) {
                    for (queryID, value) in entries.sorted(by: { $0.key < $1.key }) {
                        // The attachment rows' slot is not a query anyone named.
                        let shown = queryID == SyncContext.attachmentRowsQueryID ? "(attachment rows)" : queryID
                        rows.append([table, shown] + Self.deltaToken(value, now: now))
                    }
                }
                lines.append(
                    TextTable.render(
                        headers: ["table", "query id", "pulled up to", "filter"], rows: rows, totalWidth: width))
            }
            return lines.joined(separator: "\n")
        }
    }

    /// `line` in lines of at most `width` columns, broken between words; the lines after the first
    /// are indented by two.
    public static func wrapped(_ line: String, width: Int) -> [String] {
        guard TextTable.displayWidth(line) > width else { return [line] }
        var lines: [String] = []
        var current = ""
        for word in line.split(separator: " ", omittingEmptySubsequences: false) {
            let candidate = current.isEmpty ? String(word) : current + " " + word
            if !current.trimmingCharacters(in: .whitespaces).isEmpty, TextTable.displayWidth(candidate) > width {
                lines.append(current)
                current = "  " + word
            } else {
                current = candidate
            }
        }
        lines.append(current)
        return lines
    }

    /// A delta token for people: where the pull stands (`5 min ago (2026-11-26 13:09:44 UTC)`) and
    /// the filter it belongs to; a token Ferry did not write shows as it is.
    static func deltaToken(_ stored: String, now: Timestamp) -> [String] {
        guard case .object(let object)? = try? JSONValue(parsing: stored),
            let time = object["updatedAt"]?.stringValue.flatMap({ Timestamp(iso8601: $0) })
        else { return [stored, ""] }
        let shown = String(time.iso8601.prefix(19)).replacingOccurrences(of: "T", with: " ") + " UTC"
        let filter = object["filter"]?.stringValue ?? ""
        return [ago(from: time, to: now) + " (" + shown + ")", filter.isEmpty ? "(all)" : filter]
    }

    /// An operation's state for people: "waiting", "sent, no answer yet", "failed".
    static func words(_ state: OperationState) -> String {
        switch state {
        case .pending: "waiting"
        case .inFlight: "sent, no answer yet"
        case .failed: "failed"
        }
    }

    static func unreachableReason(_ reachability: ServerReachability) -> String? {
        if case .unreachable(_, let reason) = reachability { return reason.message }
        return nil
    }

    static func cell(_ value: JSONValue?) -> String {
        switch value {
        case nil: ""
        case .string(let text)?: text
        case let other?: other.serialized()
        }
    }
}
