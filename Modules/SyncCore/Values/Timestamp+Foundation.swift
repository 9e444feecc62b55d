// Timestamp <-> Foundation's Date. SyncCore imports FoundationEssentials (value types only, no I/O)
// where it bridges Foundation types; full Foundation only where FoundationEssentials is missing.
#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

extension Timestamp {
    /// The instant of `date`, truncated to the millisecond: the precision of the wire.
    ///
    /// The date is first rounded to the microsecond, so that a `Date` made from a millisecond value
    /// (whose `Double` may lie a hair below it) keeps that millisecond; what lies below the
    /// millisecond is then dropped, never rounded up.
    ///
    /// ```swift
    /// let stamp = Timestamp(Date(timeIntervalSince1970: 1_700_000_000.123456))
    /// stamp.iso8601                 // "2023-11-14T22:13:20.123Z"
    /// Date(stamp)                   // 2023-11-14 22:13:20.123 +0000
    /// ```
    ///
    /// Dates beyond about 292,000 years either side of 1970 saturate to ``Timestamp``'s first or last
    /// millisecond.
    public init(_ date: Date) {
        let microseconds = (date.timeIntervalSinceReferenceDate * 1_000_000).rounded()
        // 2^63 microseconds: about 292,000 years either side of 2001.
        guard microseconds.magnitude < 9.2e18 else {
            self.init(millisecondsSince1970: date.timeIntervalSinceReferenceDate < 0 ? .min : .max)
            return
        }
        let (milliseconds, _) = Int64(microseconds).floorDivided(by: 1000)
        self.init(millisecondsSince1970: milliseconds + Self.referenceDateMilliseconds)
    }

    /// 2001-01-01T00:00:00Z, Foundation's reference date, in milliseconds since 1970.
    static let referenceDateMilliseconds: Int64 = 978_307_200_000
}

extension Date {
    /// The instant of `timestamp`, exactly (a `Date` carries a millisecond exactly enough that
    /// ``Timestamp/init(_:)`` gives back the same timestamp).
    ///
    /// ```swift
    /// let updated = Date(try Timestamp(parsing: "2024-08-23T20:22:54.291Z"))
    /// Timestamp(updated).millisecondsSince1970   // 1724444574291
    /// ```
    public init(_ timestamp: Timestamp) {
        let milliseconds = Double(timestamp.millisecondsSince1970) - Double(Timestamp.referenceDateMilliseconds)
        self.init(timeIntervalSinceReferenceDate: milliseconds / 1000)
    }
}
