// What a push reports: its result, and the conflicts its handler settled.

/// What a push did.
public struct PushResult: Sendable, Hashable {
    /// Operations the server accepted, or whose conflict the handler resolved.
    public var pushed: Int = 0
    /// Operations that failed during this push; their errors are in the errors table
    /// (``SyncContext/operationErrors(table:)``) and they stay queued.
    public var failed: [OperationErrorRecord] = []
    /// The longest wait the server asked for (`Retry-After`) when it failed operations for now
    /// (503, 429): a retry should not come sooner.
    public var retryAfter: Duration?
    /// The conflicts the conflict handler settled during this push (counted in ``pushed`` too), in
    /// queue order: what an app or a person is told, since `useServer` drops a local change.
    public var resolvedConflicts: [ResolvedConflict] = []
    /// Attachment uploads and deletes this push completed on the server, after the operations.
    public var attachmentsTransferred = 0
    /// Pending uploads this push dropped, with their files, because their item is gone: deleted on
    /// this device, or on the server (it answered 410, as another device deleted the item).
    public var attachmentsDropped: [AttachmentTransfer] = []
    /// Deletes of attachments this push dropped because another device replaced the file since
    /// (the server answered 412): the newer file stays, and the next pull brings it back.
    public var attachmentsSuperseded: [AttachmentTransfer] = []

    public init(pushed: Int = 0, failed: [OperationErrorRecord] = []) {
        self.pushed = pushed
        self.failed = failed
    }

    /// Whether every operation went through.
    public var isComplete: Bool { failed.isEmpty }
}

/// A conflict the conflict handler settled during a push (``PushResult/resolvedConflicts``).
public struct ResolvedConflict: Sendable, Hashable {
    /// The item's table.
    public var table: String
    /// The item's id.
    public var itemID: String
    /// The local operation that conflicted.
    public var kind: OperationKind
    /// What the handler chose: `useServer` dropped the local change (or the server had deleted the
    /// item, which always wins); `useClient` and `useMerged` sent it again and the server took it.
    public var resolution: ConflictResolution

    public init(table: String, itemID: String, kind: OperationKind, resolution: ConflictResolution) {
        self.table = table
        self.itemID = itemID
        self.kind = kind
        self.resolution = resolution
    }
}
