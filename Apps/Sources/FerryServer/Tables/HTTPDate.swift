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

    /// Parses an IMF-fixdate exactly as RFC 9110 writes it (two-digit day, four-digit year, two-digit
    /// hour, minute and second; the weekday is not checked); `nil` for anything else, which callers
    /// ignore as RFC 9110 says.
    static func parse(_ text: String) -> Int64? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), parts[5] == "GMT",
            let day = digits(parts[1], count: 2), let monthIndex = months.firstIndex(of: String(parts[2])),
            let year = digits(parts[3], count: 4)
        else { return nil }
        let clock = parts[4].split(separator: ":", omittingEmptySubsequences: false)
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
