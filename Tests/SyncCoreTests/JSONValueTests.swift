import Testing

@testable import SyncCore

@Suite("JSONValue")
struct JSONValueTests {
    @Test(arguments: [
        "null", "true", "false", "0", "-0", "42", "-42", "9223372036854775807", "-9223372036854775808", "1.0", "0.1",
        "1e+20", "1.5e-07", "\"\"", "\"hi\"", "[]", "{}", "[1,2.5,\"x\",null,true,[],{}]",
        "{\"a\":{\"b\":[1,{\"c\":null}]},\"z\":-1.25}", "\"\\u00e9\\ud83c\\udfac\"",
        "\"line\\nbreak\\t\\\"q\\\" \\\\\"",
    ])
    func textRoundTripsToTheSameValue(_ text: String) throws {
        let value = try JSONValue(parsing: text)
        #expect(try JSONValue(parsing: value.serialized()) == value)
    }

    @Test func integersAndDoublesStayApart() throws {
        #expect(try JSONValue(parsing: "1") == .int(1))
        #expect(try JSONValue(parsing: "1.0") == .double(1.0))
        #expect(try JSONValue(parsing: "1e2") == .double(100))
        #expect(JSONValue.double(3).serialized() == "3.0")
        #expect(JSONValue.int(3).serialized() == "3")
        // Past Int64 a number becomes a double rather than failing.
        #expect(try JSONValue(parsing: "9223372036854775808") == .double(9_223_372_036_854_775_808))
    }

    @Test func serializationIsCompactWithSortedKeys() {
        let value: JSONValue = ["b": 1, "a": [true, .null], "c": "é\"\n"]
        #expect(value.serialized() == #"{"a":[true,null],"b":1,"c":"é\"\n"}"#)
        #expect(JSONValue.string("\u{01}").serialized() == #""\u0001""#)
        #expect(JSONValue.double(.infinity).serialized() == "null")
    }

    @Test func doublesRoundTripBitForBit() throws {
        for number in [0.1, 1.0 / 3.0, 2.5e-308, 1.7976931348623157e308, -0.0, 123_456_789.123_456_79] {
            let back = try JSONValue(parsing: JSONValue.double(number).serialized())
            #expect(back.doubleValue?.bitPattern == number.bitPattern, "\(number)")
        }
    }

    @Test(arguments: [
        ("", 0), ("{", 1), ("[1,]", 3), ("{\"a\" 1}", 5), ("01", 0), ("1.", 2), ("\"abc", 0), ("tru", 0),
        ("[1] x", 4), ("\"\\x\"", 1), ("\"\u{01}\"", 1), ("-", 0), ("\"\\ud800\"", 7),
    ])
    func malformedTextFailsWithAnOffset(_ text: String, _ offset: Int) {
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: text) }
        do {
            _ = try JSONValue(parsing: text)
        } catch {
            #expect(error.offset == offset, "\(text.debugDescription): \(error)")
            #expect(!error.description.isEmpty)
        }
    }

    @Test func deepNestingFailsCleanly() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONParseError.self) { try JSONValue(parsing: deep) }
        let fine = String(repeating: "[", count: 500) + String(repeating: "]", count: 500)
        #expect((try? JSONValue(parsing: fine)) != nil)
    }

    @Test func invalidUTF8IsRejected() throws {
        let bytes: [UInt8] = [0x22, 0xFF, 0xFE, 0x22]
        #expect(throws: JSONParseError.self) { try JSONValue(parsingUTF8: bytes) }
        // After ASCII, in a key, and after an escape: the ASCII fast path must not take them.
        for invalid: [UInt8] in [
            Array(#""abc"#.utf8) + [0x80, 0x22], Array(#"{"k"#.utf8) + [0xC3, 0x22, 0x3A, 0x31, 0x7D],
            Array(#""a\n"#.utf8) + [0xED, 0xA0, 0x80, 0x22],
        ] {
            #expect(throws: JSONParseError.self) { try JSONValue(parsingUTF8: invalid) }
        }
        // ASCII up to DEL, and valid UTF-8 with and without escapes, come through unchanged.
        #expect(try JSONValue(parsingUTF8: Array("\"a\u{7F}~\"".utf8)) == .string("a\u{7F}~"))
        #expect(try JSONValue(parsing: #"{"é":"🎬 x","n\t":"\u00e9é"}"#) == ["é": "🎬 x", "n\t": "éé"])
    }

    @Test func literalsAndAccessors() {
        let value: JSONValue = ["id": "a", "n": 2, "x": 1.5, "ok": true, "list": [1], "none": nil]
        #expect(value["id"]?.stringValue == "a")
        #expect(value["n"]?.intValue == 2)
        #expect(value["n"]?.doubleValue == 2.0)
        #expect(value["x"]?.doubleValue == 1.5)
        #expect(value["ok"]?.boolValue == true)
        #expect(value["list"]?.arrayValue == [1])
        #expect(value["none"]?.isNull == true)
        #expect(value["missing"] == nil)
    }

    @Test func systemPropertyAccessorsReadItems() throws {
        var item: JSONObject = [
            "id": "a", "version": "AAAA", "updatedAt": "2024-08-23T20:22:54.291+00:00", "deleted": true,
        ]
        #expect(item.id == "a")
        #expect(item.version == "AAAA")
        #expect(item.updatedAt?.iso8601 == "2024-08-23T20:22:54.291Z")
        #expect(item.isDeleted)
        item.id = "b"
        #expect(item["id"] == "b")
        #expect(SystemProperty.isSystemProperty("UpdatedAt"))
        #expect(!SystemProperty.isSystemProperty("title"))
    }
}
