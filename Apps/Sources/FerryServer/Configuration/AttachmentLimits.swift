/// The limits of attachments (docs/attachments.md), advertised in `$capabilities`.
///
/// ```swift
/// var configuration = ServerConfiguration(port: 0, logger: logger)
/// configuration.attachments = AttachmentLimits(maximumFileSize: 50 << 20)
/// ```
public struct AttachmentLimits: Sendable, Hashable {
    /// The largest file, in bytes (default 256 MiB); larger is 413.
    public var maximumFileSize: Int64
    /// The most bytes one item's attachments may take together (default 1 GiB).
    public var maximumItemSize: Int64
    /// The most bytes one user's attachments may take together, or the anonymous users' together
    /// on tables without users (default 10 GiB).
    public var maximumUserSize: Int64
    /// How long an upload nobody continues is kept (default 24 hours).
    public var uploadExpiry: Duration
    /// How long content no attachment names any more is kept before it is deleted (default 7
    /// days), so that a device that pulled the row a moment before can still download it.
    public var retention: Duration
    /// How often the server's sweeper removes expired uploads (default 1 hour).
    public var sweepInterval: Duration

    public init(
        maximumFileSize: Int64 = 256 << 20, maximumItemSize: Int64 = 1 << 30, maximumUserSize: Int64 = 10 << 30,
        uploadExpiry: Duration = .seconds(24 * 3600), retention: Duration = .seconds(7 * 24 * 3600),
        sweepInterval: Duration = .seconds(3600)
    ) {
        self.maximumFileSize = maximumFileSize
        self.maximumItemSize = maximumItemSize
        self.maximumUserSize = maximumUserSize
        self.uploadExpiry = uploadExpiry
        self.retention = retention
        self.sweepInterval = sweepInterval
    }

    func validate() throws(ConfigurationError) {
        guard maximumFileSize >= 1 else { throw ConfigurationError("maximumFileSize must be at least 1 byte") }
        guard maximumItemSize >= maximumFileSize else {
            throw ConfigurationError("maximumItemSize must be at least maximumFileSize")
        }
        guard maximumUserSize >= maximumItemSize else {
            throw ConfigurationError("maximumUserSize must be at least maximumItemSize")
        }
        guard uploadExpiry >= .seconds(60), retention >= .zero else {
            throw ConfigurationError("uploadExpiry must be at least 60 seconds and retention not negative")
        }
        guard sweepInterval >= .seconds(1) else { throw ConfigurationError("sweepInterval must be at least 1 second") }
    }
}
