import Foundation
import SyncCore

/// A typed model: `Codable` plus the name of its table on the server.
///
/// The id stays non-optional: `.unassigned` (the nil UUID) asks the insert to generate one (a
/// UUIDv7). A `Date` travels as `"2026-11-27T09:00:00.000Z"`, the form other clients use.
struct Todo: SyncModel, Equatable {
    static let tableName = "todo"
    var id: UUID = .unassigned
    var title: String
    var due: Date
    var done = false
}

extension Todo {
    /// One line for the terminal: `Buy milk (due 2026-11-27)`.
    var line: String { "\(title)\(done ? " [done]" : "") (due \(due.formatted(.iso8601.year().month().day())))" }
}

/// A custom conflict handler: when both devices changed an item, keep this device's edit but let
/// "done" win from either side (a finished task never comes back).
///
/// A push calls it for each item the server changed since this device last saw it; it works on
/// the JSON items, as they are on the wire. The built-in ones are `.serverWins`, `.clientWins`,
/// `.threeWayMerge(preferring:)` and `.keep` (the default: keep the conflict for the app).
struct KeepMineButDone: ConflictHandler {
    func resolve(_ conflict: SyncConflict) async throws -> ConflictResolution {
        guard var mine = conflict.clientItem, let theirs = conflict.serverItem else { return .useServer }
        mine["done"] = .bool(mine["done"]?.boolValue == true || theirs["done"]?.boolValue == true)
        return .useMerged(mine)
    }
}
