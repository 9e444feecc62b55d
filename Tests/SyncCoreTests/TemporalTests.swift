import Testing

@testable import SyncCore

@Suite("Timestamps, dates and times")
struct TemporalTests {
    @Test(arguments: [
        ("2024-08-23T20:22:54.291Z", "2024-08-23T20:22:54.291Z"),
        ("2024-08-23T20:22:54.291+00:00", "2024-08-23T20:22:54.291Z"),
        ("2024-08-23T22:22:54.291+02:00", "2024-08-23T20:22:54.291Z"),
        ("2024-08-23T20:22:54Z", "2024-08-23T20:22:54.000Z"),
        ("2024-08-23T20:22Z", "2024-08-23T20:22:00.000Z"),
        ("2024-08-23T20:22:54.2919999Z", "2024-08-23T20:22:54.291Z"),
        ("2024-08-23t20:22:54.5z", "2024-08-23T20:22:54.500Z"),
        ("1960-01-01T05:30:00Z", "1960-01-01T05:30:00.000Z"),
        ("2000-02-29T00:00:00.000-0130", "2000-02-29T01:30:00.000Z"),
    ])
    func timestampsParseAndFormatInUTCWithMilliseconds(_ text: String, _ expected: String) throws {
        #expect(try Timestamp(parsing: text).iso8601 == expected)
    }

    @Test(arguments: [
        "", "2024-08-23", "2024-13-01T00:00:00Z", "2023-02-29T00:00:00Z", "2024-08-23T24:00:00Z",
        "2024-08-23T20:22:54", "2024-08-23T20:22:54.Z", "2024-08-23T20:22:54Zjunk", "24-08-23T20:22:54Z",
        // An offset that carries the instant into year -1 or 10000, whose text does not parse back.
        "0000-01-01T00:00:00+23:59", "0000-01-01T00:00:00.000+00:01", "9999-12-31T23:59:59.999-00:01",
    ])
    func invalidTimestampsAreRejected(_ text: String) {
        #expect(Timestamp(iso8601: text) == nil)
        #expect(throws: TemporalParseError.self) { try Timestamp(parsing: text) }
    }

    @Test func theEndsOfTheTextRangeRoundTrip() throws {
        for text in [
            "0000-01-01T00:00:00.000Z", "0000-01-01T00:01:00-00:01", "9999-12-31T23:59:59.999Z",
            "9999-12-31T23:59:59.999+00:01",
        ] {
            let value = try Timestamp(parsing: text)
            #expect(Timestamp(iso8601: value.iso8601) == value, "\(text) → \(value.iso8601)")
        }
    }

    @Test func theCanonicalFormFastPathAgreesWithTheGeneralParser() {
        // Every canonical text round-trips, and a canonical-length text with one byte changed parses
        // exactly as the same text with an offset spelled out does (which takes the general path).
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 11
        }
        let bytes = Array("0123456789-T:.Zx ".utf8)
        for _ in 0..<20_000 {
            let milliseconds = Int64(next() % 253_402_300_800_000)  // 1970 to 9999
            let text = Timestamp(millisecondsSince1970: milliseconds).iso8601
            #expect(Timestamp(iso8601: text)?.millisecondsSince1970 == milliseconds)
            var changed = Array(text.utf8)
            changed[Int(next() % 24)] = bytes[Int(next() % UInt64(bytes.count))]
            let mutated = String(decoding: changed, as: UTF8.self)
            let general = mutated.hasSuffix("Z") ? String(mutated.dropLast()) + "+00:00" : mutated
            #expect(Timestamp(iso8601: mutated) == Timestamp(iso8601: general), "\(mutated)")
        }
    }

    @Test func theFormatWrittenInPlaceAgreesWithThePartsFormattedOneByOne() {
        var state: UInt64 = 0x2545_F491_4F6C_DD1D
        // Year 0 to 9999 (written in place), and around them (the general path).
        let year0: Int64 = -62_167_219_200_000
        let year10000: Int64 = 253_402_300_800_000
        var samples: [Int64] = [0, -1, year0, year0 - 1, year10000 - 1, year10000, .min, .max]
        for _ in 0..<20_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            samples.append(year0 - 86_400_000 + Int64((state >> 11) % UInt64(year10000 - year0 + 2 * 86_400_000)))
        }
        for milliseconds in samples {
            let timestamp = Timestamp(millisecondsSince1970: milliseconds)
            let expected = "\(timestamp.date.iso8601)T\(timestamp.timeOfDay.iso8601WithMilliseconds)Z"
            #expect(timestamp.iso8601 == expected, "\(milliseconds)")
        }
    }

    @Test func timestampArithmeticIsExact() throws {
        let epoch = try Timestamp(parsing: "1970-01-01T00:00:00.000Z")
        #expect(epoch.millisecondsSince1970 == 0)
        let before = Timestamp(millisecondsSince1970: -1)
        #expect(before.iso8601 == "1969-12-31T23:59:59.999Z")
        #expect(before.date == CalendarDate(year: 1969, month: 12, day: 31))
        #expect(before.timeOfDay.hour == 23)
        #expect(Timestamp(millisecondsSince1970: 1_724_444_574_291).iso8601 == "2024-08-23T20:22:54.291Z")
    }

    @Test func calendarDatesRoundTripOverFourHundredYears() {
        var day = CalendarDate(year: 1800, month: 1, day: 1)!.daysSince1970
        let end = CalendarDate(year: 2200, month: 12, day: 31)!.daysSince1970
        var previous: CalendarDate?
        while day <= end {
            let date = CalendarDate(daysSince1970: day)
            #expect(date.daysSince1970 == day)
            if let previous { #expect(previous < date) }
            previous = date
            day += 1
        }
        #expect(CalendarDate(iso8601: "2024-02-29")?.iso8601 == "2024-02-29")
        #expect(CalendarDate(iso8601: "2023-02-29") == nil)
        #expect(CalendarDate(iso8601: "2023-2-28") == nil)
    }

    @Test func timesOfDayParseWithOptionalSecondsAndFractions() {
        #expect(TimeOfDay(iso8601: "07:14")?.iso8601 == "07:14:00")
        #expect(TimeOfDay(iso8601: "07:14:05.25")?.iso8601 == "07:14:05.250")
        #expect(TimeOfDay(iso8601: "24:00:00") == nil)
        #expect(TimeOfDay(iso8601: "12:60") == nil)
        #expect(TimeOfDay(hour: 12, minute: 15)! < TimeOfDay(hour: 12, minute: 15, second: 1)!)
    }

    @Test func timestampsAreCodableAsText() throws {
        let value = JSONValue.string(Timestamp(millisecondsSince1970: 5).iso8601)
        #expect(value == "1970-01-01T00:00:00.005Z")
    }
}
