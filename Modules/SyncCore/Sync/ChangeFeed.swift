// The server's change feed, as the engine sees it: the events of `RemoteService.changeFeed` (hints
// that tables changed, which automatic sync turns into pulls), and the default for a backend without
// a feed. Not to be confused with a store's own commits (`StoreCommits`, what observation hears) or
// with the local edits the queue records (`QueuedEdits`).

/// One event of a backend's change feed: hints that tables changed, so that a client pulls when
/// something changed instead of polling. A hint says nothing about which rows changed.
///
/// ```swift
/// for try await event in try await remote.changeFeed(tables: ["todo"], after: savedPosition) {
///     switch event {
///     case .ready(let versions, let position): print(versions); savedPosition = position
///     case .changed(let table, _, let position): try await context.pull(table); savedPosition = position
///     case .caughtUp(let position): savedPosition = position
///     }
/// }
/// ```
public enum RemoteChangeEvent: Sendable, Hashable {
    /// The feed opened without a position: the version of every table the caller may read.
    case ready(versions: [String: Int64], position: String)
    /// `table` changed; its newest row the caller may read has `version`.
    case changed(table: String, version: Int64, position: String)
    /// The feed resumed from a position and has told every table that changed since: the device is
    /// up to date once it pulled those (Ferry's server sends it after a resumed position's hints).
    case caughtUp(position: String)

    /// Where the feed was after this event: give it to ``RemoteService/changeFeed(tables:after:)``
    /// to resume without missing a change.
    public var position: String {
        switch self {
        case .ready(_, let position), .changed(_, _, let position), .caughtUp(let position): position
        }
    }
}

extension RemoteService {
    /// No change feed.
    public func offersChangeFeed() async -> Bool { false }

    /// No change feed: throws ``RemoteError/Code/notFound``.
    public func changeFeed(tables: [String]?, after position: String?) async throws(RemoteError)
        -> AsyncThrowingStream<RemoteChangeEvent, any Error>
    {
        throw RemoteError(.notFound, "this backend has no change feed")
    }
}
