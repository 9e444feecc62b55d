import Foundation
import Synchronization
import SyncCore

/// HTTP dates (RFC 9110 IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`) for `Last-Modified`,
/// `If-Modified-Since` and `If-Unmodified-Since`. They have second precision.
enum HTTPDate {
    static let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]  // 1970-01-01 was a Thursday
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The last second formatted and its text: the items of a batch, or of a page, mostly share
    /// their second (formatting each one's took 1% of a batch's time).
    private static let lastFormatted = Mutex<(seconds: Int64, text: String)?>(nil)

    /// The IMF-fixdate of an instant (milliseconds are dropped).
    static func format(_ timestamp: Timestamp) -> String {
        let seconds =
            timestamp.millisecondsSince1970 >= 0
            ? timestamp.millisecondsSince1970 / 1000 : (timestamp.millisecondsSince1970 - 999) / 1000
        if let last = lastFormatted.withLock({ $0 }), last.seconds == seconds { return last.text }
        let text = format(seconds: seconds)
        lastFormatted.withLock { $0 = (seconds, text) }
        return text
    }

    private static func format(seconds: Int64) -> String {
        let days = Int(seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400)
        let secondOfDay = Int(seconds - Int64(days) * 86_400)
        let date = CalendarDate(daysSince1970: days)
        let weekday = weekdays[((days % 7) + 7) % 7]
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(weekday), \(two(date.day)) \(months[date.month - 1]) \(date.year) "
            + "\(two(secondOfDay / 3600)):\(two(secondOfDay / 60 % 60)):\(two(secondOfDay % 60)) GMT"
    }

    /// The `Date` an answer goes out with, given the one Hummingbird set and the answer's
    /// `Last-Modified`: the later of the two. Hummingbird's `Date` is taken from a cache refreshed
    /// once a second, so it lagged the clock a write had just stamped its item with, and an answer
    /// said it was modified after it was sent (RFC 9110 § 8.8.2.1 forbids it). `Last-Modified` is
    /// kept as it is: a client sends it back in `If-Unmodified-Since`, and an earlier one would
    /// fail that precondition.
    static func answerDate(_ date: String?, lastModified: String) -> String? {
        guard let modified = parse(lastModified) else { return nil }
        if let date, let sent = parse(date), sent >= modified { return nil }
        return lastModified
    }

    /// Parses an HTTP date exactly as RFC 9110 § 5.6.7 writes its three forms (the weekday is not
    /// checked), seconds since 1970; `nil` for anything else, which callers ignore as RFC 9110 says:
    /// - IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT` (what servers send);
    /// - the obsolete RFC 850 form, `Sunday, 06-Nov-94 08:49:37 GMT`, its two-digit year taken as
    ///   the most recent year with those digits that is not more than 50 years ahead;
    /// - the obsolete asctime form, `Sun Nov  6 08:49:37 1994`.
    ///
    /// Recipients must take all three (§ 5.6.7): the obsolete ones were ignored, so a conditional
    /// write such a client sent went through unconditionally.
    static func parse(_ text: String) -> Int64? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        if parts.count == 4, parts[0].hasSuffix(","), parts[3] == "GMT" {
            // RFC 850: day-month-year in one part.
            let date = parts[1].split(separator: "-", omittingEmptySubsequences: false)
            guard date.count == 3, let day = digits(date[0], count: 2), let year = digits(date[2], count: 2) else {
                return nil
            }
            return seconds(year: fullYear(year), month: date[1], day: day, clock: parts[2])
        }
        if parts.count == 6, parts[0].count == 3, parts[2].isEmpty, let day = digits(parts[3], count: 1) {
            // asctime with a one-digit day: `Nov  6`.
            guard let year = digits(parts[5], count: 4) else { return nil }
            return seconds(year: year, month: parts[1], day: day, clock: parts[4])
        }
        if parts.count == 5, parts[0].count == 3, !parts[0].hasSuffix(","), let day = digits(parts[2], count: 2) {
            // asctime with a two-digit day: `Nov 16`.
            guard let year = digits(parts[4], count: 4) else { return nil }
            return seconds(year: year, month: parts[1], day: day, clock: parts[3])
        }
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), parts[5] == "GMT",
            let day = digits(parts[1], count: 2), let year = digits(parts[3], count: 4)
        else { return nil }
        return seconds(year: year, month: parts[2], day: day, clock: parts[4])
    }

    /// A two-digit year as RFC 9110 § 5.6.7 says: the most recent past year with those digits
    /// when the nearest would be more than 50 years ahead.
    private static func fullYear(_ twoDigits: Int) -> Int {
        let now = CalendarDate(daysSince1970: Int(Date().timeIntervalSince1970 / 86_400)).year
        var year = now - now % 100 + twoDigits
        if year > now + 50 { year -= 100 }
        return year
    }

    private static func seconds(year: Int, month: Substring, day: Int, clock text: Substring) -> Int64? {
        guard let monthIndex = months.firstIndex(of: String(month)) else { return nil }
        let clock = text.split(separator: ":", omittingEmptySubsequences: false)
        guard clock.count == 3, let hour = digits(clock[0], count: 2), let minute = digits(clock[1], count: 2),
            let second = digits(clock[2], count: 2), hour < 24, minute < 60, second < 61,
            let date = CalendarDate(year: year, month: monthIndex + 1, day: day)
        else { return nil }
        return Int64(date.daysSince1970) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }

    /// The value of exactly `count` ASCII digits.
    private static func digits(_ text: Substring, count: Int) -> Int? {
        guard text.utf8.count == count else { return nil }
        var value = 0
        for byte in text.utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }
}
