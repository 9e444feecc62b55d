import Foundation
import Testing

@testable import SyncCore

/// Foundation's types in the wire's forms, through every kind of container of the typed tables'
/// encoder and decoder.
@Suite("Foundation values on the wire")
struct WireValueTests {
    let encoder = JSONValueEncoder()
    let decoder = JSONValueDecoder()

    /// 2023-11-14T22:13:20.123456Z.
    static let instant = Date(timeIntervalSince1970: 1_700_000_000.123456)
    static let uuid = UUID(uuidString: "0193F4A2-7C1E-7A3B-8C2D-5E6F7A8B9C0D")!

    @Test func datesAreISO8601InUTCWithExactlyThreeFractionDigits() throws {
        #expect(try encoder.encode(Self.instant) == "2023-11-14T22:13:20.123Z")
        // A date made from a millisecond value keeps it, though its Double lies a hair below.
        #expect(try encoder.encode(Date(timeIntervalSince1970: 1_700_000_000.123)) == "2023-11-14T22:13:20.123Z")
        #expect(try encoder.encode(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        // Truncated, never rounded up; before 1970 too.
        #expect(try encoder.encode(Date(timeIntervalSince1970: 0.9999)) == "1970-01-01T00:00:00.999Z")
        #expect(try encoder.encode(Date(timeIntervalSince1970: -0.0005)) == "1969-12-31T23:59:59.999Z")
        // Years the wire cannot carry are refused, not written as text no parser reads.
        #expect(throws: EncodingError.self) { try encoder.encode(Date(timeIntervalSince1970: 1e12)) }
    }

    @Test(arguments: [
        ("2023-11-14T22:13:20.123Z", 1_700_000_000_123 as Int64),
        ("2023-11-14T22:13:20Z", 1_700_000_000_000),
        ("2023-11-14T22:13:20.123456Z", 1_700_000_000_123),
        ("2023-11-14T23:13:20.123+01:00", 1_700_000_000_123),
        ("2023-11-14T22:13:20.123+00:00", 1_700_000_000_123),
        ("2023-11-14T17:13:20.1-05:00", 1_700_000_000_100),
    ])
    func datesReadWhatOtherClientsSend(_ text: String, _ milliseconds: Int64) throws {
        let date = try decoder.decode(Date.self, from: .string(text))
        #expect(Timestamp(date).millisecondsSince1970 == milliseconds)
        #expect(date == Date(Timestamp(millisecondsSince1970: milliseconds)))
    }

    /// A number beyond Float's range read as infinity, which the encoder refuses: the row decoded,
    /// and no update of it could be written. It does not fit now, and is reported so.
    @Test func aNumberBeyondFloatDoesNotFitInOne() throws {
        struct Reading: Codable { var score: Float }
        #expect(try decoder.decode(Float.self, from: .double(3.4e38)) == 3.4e38)
        #expect(try decoder.decode(Reading.self, from: ["score": 0.5]).score == 0.5)
        for value: JSONValue in [1e300, -1e300] {
            let error = try #require(throws: DecodingError.self) {
                try decoder.decode(Reading.self, from: ["score": value])
            }
            #expect("\(error)".contains("does not fit in a Float"), "\(error)")
        }
    }

    @Test func theNumberEarlierTypedTablesWroteStillReadsAsADate() throws {
        // `Date`'s own Codable form: seconds since 2001 (what `Date.encode(to:)` writes).
        let legacy = Self.instant.timeIntervalSinceReferenceDate
        let date = try decoder.decode(Date.self, from: .double(legacy))
        #expect(try encoder.encode(date) == "2023-11-14T22:13:20.123Z")
        #expect(try decoder.decode(Date.self, from: .int(0)) == Date(timeIntervalSinceReferenceDate: 0))
        // Milliseconds since 1970 are no such number: refused, with the form that is wanted.
        let error = try #require(throws: DecodingError.self) {
            try decoder.decode(Date.self, from: .int(1_700_000_000_123))
        }
        #expect("\(error)".contains("ISO 8601"))
        #expect(throws: DecodingError.self) { try decoder.decode(Date.self, from: "yesterday") }
        #expect(throws: DecodingError.self) { try decoder.decode(Date.self, from: true) }
    }

    @Test func timestampsAndDatesConvertExactlyAtTheMillisecond() {
        var state: UInt64 = 42
        for _ in 0..<10_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            // Any millisecond from about 1685 to 2255.
            let milliseconds = Int64(state >> 20) % 9_000_000_000_000 - 2_000_000_000_000
            let timestamp = Timestamp(millisecondsSince1970: milliseconds)
            #expect(Timestamp(Date(timestamp)) == timestamp)
        }
        #expect(Timestamp(Date.distantFuture).iso8601 == "4001-01-01T00:00:00.000Z")
        #expect(Timestamp(Date(timeIntervalSince1970: 1e300)).millisecondsSince1970 == .max)
    }

    @Test func uuidsAreLowercaseAndReadInEitherCase() throws {
        #expect(try encoder.encode(Self.uuid) == "0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d")
        #expect(try decoder.decode(UUID.self, from: "0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d") == Self.uuid)
        #expect(try decoder.decode(UUID.self, from: "0193F4A2-7C1E-7A3B-8C2D-5E6F7A8B9C0D") == Self.uuid)
        #expect(throws: DecodingError.self) { try decoder.decode(UUID.self, from: "0193f4a2") }
        // Generated ids are UUIDs (v7).
        let generated = try #require(UUID(uuidString: ItemID.generate()))
        #expect(generated.uuid.6 >> 4 == 7)
    }

    @Test func urlsAreAbsoluteStringsAndDataIsBase64() throws {
        let relative = try #require(URL(string: "b/c?d=1", relativeTo: URL(string: "https://example.org/a/")))
        #expect(try encoder.encode(relative) == "https://example.org/a/b/c?d=1")
        let url = try decoder.decode(URL.self, from: "https://example.org/a/b/c?d=1#x")
        #expect(url.absoluteString == "https://example.org/a/b/c?d=1#x")
        #expect(throws: DecodingError.self) { try decoder.decode(URL.self, from: "not a url") }

        #expect(try encoder.encode(Data([0, 1, 2, 255])) == "AAEC/w==")
        #expect(try decoder.decode(Data.self, from: "AAEC/w==") == Data([0, 1, 2, 255]))
        #expect(try decoder.decode(Data.self, from: "") == Data())
        #expect(throws: DecodingError.self) { try decoder.decode(Data.self, from: "AAEC/w") }
    }

    @Test(arguments: ["19.99", "0.1", "-0.01", "1234567890123.45", "0.000001", "99999999999.99"])
    func decimalsAreNumbersThatReadBackExactly(_ text: String) throws {
        let decimal = try #require(Decimal(string: text))
        let json = try encoder.encode(decimal)
        #expect(json == .double(try #require(Double(text))))
        #expect(try decoder.decode(Decimal.self, from: json) == decimal)
        #expect(try decoder.decode(Decimal.self, from: .string(text)) == decimal)
    }

    @Test func wholeDecimalsAreIntegersAndTooManyDigitsAreRefused() throws {
        #expect(try encoder.encode(Decimal(20)) == .int(20))
        #expect(try encoder.encode(Decimal(string: "9007199254740993")!) == .int(9_007_199_254_740_993))
        #expect(
            try decoder.decode(Decimal.self, from: .int(9_007_199_254_740_993)) == Decimal(string: "9007199254740993"))
        #expect(throws: EncodingError.self) { try encoder.encode(Decimal(string: "0.12345678901234567")!) }
        #expect(throws: EncodingError.self) { try encoder.encode(Decimal.nan) }
        #expect(throws: DecodingError.self) { try decoder.decode(Decimal.self, from: "12abc") }
        #expect(throws: DecodingError.self) { try decoder.decode(Decimal.self, from: "nan") }
    }

    /// A type that encodes its date through a single-value container.
    struct Due: Codable, Equatable {
        var date: Date
        init(_ date: Date) { self.date = date }
        init(from decoder: any Decoder) throws { date = try decoder.singleValueContainer().decode(Date.self) }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(date)
        }
    }

    struct Everything: Codable, Equatable {
        var date: Date
        var dates: [Date]
        var maybeUUIDs: [UUID?]
        var byName: [String: URL]
        var due: Due
        var nested: [String: [Data]]
        var price: Decimal
        var missing: Date?
    }

    @Test func everyContainerWritesTheWireForms() throws {
        let date = Date(Timestamp(millisecondsSince1970: 1_700_000_000_123))
        let value = Everything(
            date: date, dates: [date], maybeUUIDs: [Self.uuid, nil], byName: ["home": URL(string: "https://x.org")!],
            due: Due(date), nested: ["blobs": [Data([1])]], price: Decimal(string: "19.99")!, missing: nil)
        let json = try encoder.encode(value)
        let iso: JSONValue = "2023-11-14T22:13:20.123Z"
        let expected: JSONValue = [
            "date": iso, "dates": [iso], "maybeUUIDs": ["0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d", .null],
            "byName": ["home": "https://x.org"], "due": iso, "nested": ["blobs": ["AQ=="]], "price": 19.99,
            "missing": .null,
        ]
        #expect(json == expected)
        #expect(try decoder.decode(Everything.self, from: json) == value)
        // A missing optional field reads as nil, as a null does.
        var object = try #require(json.objectValue)
        object.removeValue(forKey: "missing")
        #expect(try decoder.decode(Everything.self, from: .object(object)) == value)
        // At the top level too.
        #expect(try encoder.encode([date]) == [iso])
        #expect(try decoder.decode([Date].self, from: [iso]) == [date])
        #expect(try decoder.decode(Due.self, from: iso) == Due(date))
    }

    @Test func nilIsWrittenAsNullEvenThroughEncodeIfPresent() throws {
        struct Note: Codable, Equatable {
            var text: String?
            var count: Int?
            var when: Date?
            var tags: [String]?
        }
        let json = try encoder.encode(Note())
        #expect(json == ["text": .null, "count": .null, "when": .null, "tags": .null])
        #expect(try decoder.decode(Note.self, from: json) == Note())
        #expect(try decoder.decode(Note.self, from: [:]) == Note())
    }
}
