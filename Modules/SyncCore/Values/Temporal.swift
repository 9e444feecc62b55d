/// An instant with millisecond precision, as the table protocol carries `createdAt` and `updatedAt`.
///
/// The wire form is UTC with milliseconds and a `Z`: `2024-08-23T20:22:54.291Z` (years 0000–9999;
/// instants outside that range have no ISO 8601 text that the parsers here accept). Parsing also
/// accepts `+00:00` and other offsets, a missing or longer fraction (truncated to milliseconds), and
/// a lowercase `t`/`z`.
///
/// ```swift
/// let t = try Timestamp(parsing: "2024-08-23T20:22:54.291+00:00")
/// t.iso8601          // "2024-08-23T20:22:54.291Z"
/// t.millisecondsSince1970  // 1724444574291
/// ```
///
/// A Foundation `Date` converts both ways: ``init(_:)`` (truncated to the millisecond) and
/// `Date(_:)`. (``date`` is the UTC ``CalendarDate``, not a Foundation `Date`.)
public struct Timestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    public var millisecondsSince1970: Int64

    /// The instants ISO 8601 text carries with a four-digit year, which every parser reads
    /// (0000-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z).
    static let wireRange: ClosedRange<Int64> = -62_167_219_200_000...253_402_300_799_999

    public init(millisecondsSince1970: Int64) {
        self.millisecondsSince1970 = millisecondsSince1970
    }

    /// Parses an ISO 8601 date-time. See the type's documentation for the accepted forms.
    public init(parsing text: some StringProtocol) throws(TemporalParseError) {
        guard let value = Timestamp(iso8601: text) else {
            throw TemporalParseError(text: String(text), kind: "date-time")
        }
        self = value
    }

    /// Parses an ISO 8601 date-time, or returns `nil`.
    public init?(iso8601 text: some StringProtocol) {
        guard let milliseconds = DigitScanner.scan(text, Timestamp.milliseconds) else { return nil }
        self.millisecondsSince1970 = milliseconds
    }

    /// Parses an ISO 8601 date-time, or returns `nil` (the `String` form, which callers in other
    /// modules reach without generic dispatch: stores parse an `updatedAt` per item written).
    public init?(iso8601 text: String) {
        guard let milliseconds = DigitScanner.scan(text, Timestamp.milliseconds) else { return nil }
        self.millisecondsSince1970 = milliseconds
    }

    private static func milliseconds(_ scanner: inout DigitScanner) -> Int64? {
        if let milliseconds = canonicalMilliseconds(scanner.bytes) { return milliseconds }
        guard let year = scanner.number(digits: 4), scanner.skip("-"),
            let month = scanner.number(digits: 2), scanner.skip("-"),
            let day = scanner.number(digits: 2), CalendarDate.isValid(year: year, month: month, day: day)
        else { return nil }
        guard scanner.skip("T") || scanner.skip("t") || scanner.skip(" ") else { return nil }
        guard let hour = scanner.number(digits: 2), hour < 24, scanner.skip(":"),
            let minute = scanner.number(digits: 2), minute < 60
        else { return nil }
        var second = 0
        var millisecond = 0
        if scanner.skip(":") {
            guard let value = scanner.number(digits: 2), value < 60 else { return nil }
            second = value
            if scanner.skip(".") {
                guard let fraction = scanner.fractionMilliseconds() else { return nil }
                millisecond = fraction
            }
        }
        var offsetMinutes = 0
        if scanner.skip("Z") || scanner.skip("z") {
            offsetMinutes = 0
        } else if let sign = scanner.sign() {
            guard let hours = scanner.number(digits: 2), hours < 24 else { return nil }
            _ = scanner.skip(":")
            guard let minutes = scanner.number(digits: 2), minutes < 60 else { return nil }
            offsetMinutes = sign * (hours * 60 + minutes)
        } else {
            return nil
        }
        guard scanner.isAtEnd else { return nil }
        let days = Int64(CalendarDate.daysSince1970(year: year, month: month, day: day))
        let seconds = days * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetMinutes * 60)
        let instant = seconds * 1000 + Int64(millisecond)
        // An offset may carry a date at either end into year -1 or 10000, whose text no parser
        // here reads back: refused, as those years' own text is.
        return Self.textRange.contains(instant) ? instant : nil
    }

    /// The instants of years 0000 to 9999 in UTC: those with a wire form.
    static let textRange: ClosedRange<Int64> =
        Int64(CalendarDate.daysSince1970(year: 0, month: 1, day: 1)) * 86_400_000...Int64(
            CalendarDate.daysSince1970(year: 9_999, month: 12, day: 31) + 1) * 86_400_000 - 1

    /// The wire form `yyyy-MM-ddTHH:mm:ss.SSSZ` read in one pass (every item a store writes carries
    /// one); `nil` for any other form, which the general parser then reads.
    private static func canonicalMilliseconds(_ bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard bytes.count == 24, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            bytes[19] == UInt8(ascii: "."), bytes[23] == UInt8(ascii: "Z")
        else { return nil }
        var valid = true
        func number(_ start: Int, _ count: Int) -> Int {
            var value = 0
            for index in start..<(start + count) {
                let digit = bytes[index] &- UInt8(ascii: "0")
                if digit > 9 { valid = false }
                value = value * 10 + Int(digit)
            }
            return value
        }
        let year = number(0, 4)
        let month = number(5, 2)
        let day = number(8, 2)
        let hour = number(11, 2)
        let minute = number(14, 2)
        let second = number(17, 2)
        let millisecond = number(20, 3)
        guard valid, hour < 24, minute < 60, second < 60, CalendarDate.isValid(year: year, month: month, day: day)
        else { return nil }
        let days = Int64(CalendarDate.daysSince1970(year: year, month: month, day: day))
        return (days * 86_400 + Int64(hour * 3600 + minute * 60 + second)) * 1000 + Int64(millisecond)
    }

    /// The wire form: `yyyy-MM-ddTHH:mm:ss.SSSZ` in UTC.
    public var iso8601: String {
        let (days, milliseconds) = millisecondsSince1970.floorDivided(by: 86_400_000)
        let date = CalendarDate(daysSince1970: Int(days))
        let time = TimeOfDay(millisecondsSinceMidnight: Int(milliseconds))
        guard (0...9_999).contains(date.year) else { return "\(date.iso8601)T\(time.iso8601WithMilliseconds)Z" }
        // The 24 characters written in place: through interpolation and padding, formatting the
        // time of each operation a push marks in flight took 2% of its client time.
        return String(unsafeUninitializedCapacity: 24) { text in
            func digits(_ value: Int, _ width: Int, at start: Int) {
                var value = value
                for index in stride(from: start + width - 1, through: start, by: -1) {
                    text[index] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
            }
            digits(date.year, 4, at: 0)
            digits(date.month, 2, at: 5)
            digits(date.day, 2, at: 8)
            digits(time.hour, 2, at: 11)
            digits(time.minute, 2, at: 14)
            digits(time.second, 2, at: 17)
            digits(time.millisecond, 3, at: 20)
            (text[4], text[7], text[10]) = (UInt8(ascii: "-"), UInt8(ascii: "-"), UInt8(ascii: "T"))
            (text[13], text[16], text[19], text[23]) =
                (UInt8(ascii: ":"), UInt8(ascii: ":"), UInt8(ascii: "."), UInt8(ascii: "Z"))
            return 24
        }
    }

    public var description: String { iso8601 }

    /// The UTC calendar date of this instant.
    public var date: CalendarDate {
        CalendarDate(daysSince1970: Int(millisecondsSince1970.floorDivided(by: 86_400_000).quotient))
    }

    /// The UTC time of day of this instant.
    public var timeOfDay: TimeOfDay {
        TimeOfDay(millisecondsSinceMidnight: Int(millisecondsSince1970.floorDivided(by: 86_400_000).remainder))
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.millisecondsSince1970 < rhs.millisecondsSince1970
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let value = Timestamp(iso8601: text) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "'\(text)' is not an ISO 8601 date-time.")
        }
        self = value
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(iso8601)
    }
}

/// A calendar date without a time or a zone (OData `Edm.Date`), written `yyyy-MM-dd`.
public struct CalendarDate: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int

    /// Creates a date; returns `nil` for a day that does not exist.
    public init?(year: Int, month: Int, day: Int) {
        guard CalendarDate.isValid(year: year, month: month, day: day) else { return nil }
        self.year = year
        self.month = month
        self.day = day
    }

    /// Parses `yyyy-MM-dd`, or returns `nil`.
    public init?(iso8601 text: some StringProtocol) {
        let parts = DigitScanner.scan(text) { scanner -> (Int, Int, Int)? in
            guard let year = scanner.number(digits: 4), scanner.skip("-"), let month = scanner.number(digits: 2),
                scanner.skip("-"), let day = scanner.number(digits: 2), scanner.isAtEnd
            else { return nil }
            return (year, month, day)
        }
        guard let (year, month, day) = parts else { return nil }
        self.init(year: year, month: month, day: day)
    }

    /// The date `days` after 1970-01-01; `days` is clamped to the days of the years
    /// -1,000,000,000 through 1,000,000,000, so that no input overflows.
    public init(daysSince1970 days: Int) {
        // Howard Hinnant's civil_from_days.
        let z = min(max(days, Self.supportedDays.lowerBound), Self.supportedDays.upperBound) + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        self.year = yoe + era * 400 + (m <= 2 ? 1 : 0)
        self.month = m
        self.day = d
    }

    /// Days since 1970-01-01 (negative before).
    public var daysSince1970: Int { CalendarDate.daysSince1970(year: year, month: month, day: day) }

    /// Midnight UTC of this date; dates beyond ``Timestamp``'s range (about 292 million years
    /// either side of 1970) saturate to its first or last millisecond.
    public var midnightUTC: Timestamp {
        let (milliseconds, overflow) = Int64(daysSince1970).multipliedReportingOverflow(by: 86_400_000)
        guard overflow else { return Timestamp(millisecondsSince1970: milliseconds) }
        return Timestamp(millisecondsSince1970: daysSince1970 < 0 ? .min : .max)
    }

    /// `yyyy-MM-dd`.
    public var iso8601: String { "\(year.padded(4))-\(month.padded(2))-\(day.padded(2))" }

    public var description: String { iso8601 }

    public static func < (lhs: CalendarDate, rhs: CalendarDate) -> Bool {
        (lhs.year, lhs.month, lhs.day) < (rhs.year, rhs.month, rhs.day)
    }

    static func isValid(year: Int, month: Int, day: Int) -> Bool {
        guard (1...12).contains(month), day >= 1 else { return false }
        switch month {
        case 2:
            let isLeap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
            return day <= (isLeap ? 29 : 28)
        case 4, 6, 9, 11: return day <= 30
        default: return day <= 31
        }
    }

    /// The years whose day numbers are computed exactly; ``daysSince1970`` clamps years beyond
    /// them (a date whose `year` was set to, say, `Int.max`), so that the arithmetic never overflows.
    static let supportedYears = -1_000_000_000...1_000_000_000

    /// The day numbers of ``supportedYears``.
    static let supportedDays =
        daysSince1970(
            year: supportedYears.lowerBound, month: 1, day: 1)...daysSince1970(
            year: supportedYears.upperBound, month: 12, day: 31)

    static func daysSince1970(year: Int, month: Int, day: Int) -> Int {
        // Howard Hinnant's days_from_civil, on a year clamped so that no step overflows (month and
        // day are clamped too: they only come unchecked from code that sets the fields directly).
        let year = min(max(year, supportedYears.lowerBound), supportedYears.upperBound)
        let month = min(max(month, 1), 12)
        let day = min(max(day, 1), 31)
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = month > 2 ? month - 3 : month + 9
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}

/// A time of day without a date or a zone (OData `Edm.TimeOfDay`), written `HH:mm:ss[.fff]`.
public struct TimeOfDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Milliseconds since midnight, `0..<86_400_000`.
    public var millisecondsSinceMidnight: Int

    /// A time of day; values outside one day wrap around (`-1` is `23:59:59.999`).
    public init(millisecondsSinceMidnight: Int) {
        let day = 86_400_000
        self.millisecondsSinceMidnight = (millisecondsSinceMidnight % day + day) % day
    }

    /// Creates a time; returns `nil` when a component is out of range.
    public init?(hour: Int, minute: Int, second: Int = 0, millisecond: Int = 0) {
        guard (0..<24).contains(hour), (0..<60).contains(minute), (0..<60).contains(second),
            (0..<1000).contains(millisecond)
        else { return nil }
        self.millisecondsSinceMidnight = ((hour * 60 + minute) * 60 + second) * 1000 + millisecond
    }

    /// Parses `HH:mm[:ss[.fff…]]`, or returns `nil`.
    public init?(iso8601 text: some StringProtocol) {
        let parts = DigitScanner.scan(text) { scanner -> (Int, Int, Int, Int)? in
            guard let hour = scanner.number(digits: 2), scanner.skip(":"), let minute = scanner.number(digits: 2)
            else { return nil }
            var second = 0
            var millisecond = 0
            if scanner.skip(":") {
                guard let value = scanner.number(digits: 2) else { return nil }
                second = value
                if scanner.skip(".") {
                    guard let fraction = scanner.fractionMilliseconds() else { return nil }
                    millisecond = fraction
                }
            }
            guard scanner.isAtEnd else { return nil }
            return (hour, minute, second, millisecond)
        }
        guard let (hour, minute, second, millisecond) = parts else { return nil }
        self.init(hour: hour, minute: minute, second: second, millisecond: millisecond)
    }

    public var hour: Int { millisecondsSinceMidnight / 3_600_000 }
    public var minute: Int { millisecondsSinceMidnight / 60_000 % 60 }
    public var second: Int { millisecondsSinceMidnight / 1000 % 60 }
    public var millisecond: Int { millisecondsSinceMidnight % 1000 }

    /// `HH:mm:ss`, with `.fff` when the milliseconds are not zero.
    public var iso8601: String {
        millisecond == 0 ? "\(hour.padded(2)):\(minute.padded(2)):\(second.padded(2))" : iso8601WithMilliseconds
    }

    /// `HH:mm:ss.fff`.
    public var iso8601WithMilliseconds: String {
        "\(hour.padded(2)):\(minute.padded(2)):\(second.padded(2)).\(millisecond.padded(3))"
    }

    public var description: String { iso8601 }

    public static func < (lhs: TimeOfDay, rhs: TimeOfDay) -> Bool {
        lhs.millisecondsSinceMidnight < rhs.millisecondsSinceMidnight
    }
}

/// A date or time text that could not be read.
public struct TemporalParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The text that was given.
    public var text: String
    /// What was expected: "date-time", "date" or "time".
    public var kind: String

    public var description: String { "'\(text)' is not a valid ISO 8601 \(kind)" }
}

struct DigitScanner {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// Runs `body` on a scanner over the UTF-8 of `text`, without copying native strings.
    static func scan<R>(_ text: some StringProtocol, _ body: (inout DigitScanner) -> R?) -> R? {
        if let result = text.utf8.withContiguousStorageIfAvailable({ bytes -> R? in
            var scanner = DigitScanner(bytes)
            return body(&scanner)
        }) {
            return result
        }
        return Array(text.utf8).withUnsafeBufferPointer { bytes -> R? in
            var scanner = DigitScanner(bytes)
            return body(&scanner)
        }
    }

    var isAtEnd: Bool { index == bytes.count }

    mutating func number(digits count: Int) -> Int? {
        guard bytes.count - index >= count else { return nil }
        var value = 0
        for offset in 0..<count {
            let byte = bytes[index + offset]
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            value = value * 10 + Int(byte - 0x30)
        }
        index += count
        return value
    }

    mutating func skip(_ character: Unicode.Scalar) -> Bool {
        guard index < bytes.count, bytes[index] == UInt8(ascii: character) else { return false }
        index += 1
        return true
    }

    mutating func sign() -> Int? {
        if skip("+") { return 1 }
        if skip("-") { return -1 }
        return nil
    }

    /// Reads one or more fraction digits and returns them as whole milliseconds (truncated).
    mutating func fractionMilliseconds() -> Int? {
        var value = 0
        var count = 0
        while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 {
            if count < 3 { value = value * 10 + Int(bytes[index] - 0x30) }
            count += 1
            index += 1
        }
        guard count > 0 else { return nil }
        for _ in count..<max(count, 3) { value *= 10 }
        return value
    }
}

extension Int {
    func padded(_ width: Int) -> String {
        let text = String(self.magnitude)  // `abs(Int.min)` would trap
        let padding = String(repeating: "0", count: Swift.max(0, width - text.count))
        return (self < 0 ? "-" : "") + padding + text
    }
}

extension Int64 {
    func floorDivided(by divisor: Int64) -> (quotient: Int64, remainder: Int64) {
        var quotient = self / divisor
        var remainder = self % divisor
        if remainder < 0 {
            quotient -= 1
            remainder += divisor
        }
        return (quotient, remainder)
    }
}
