import StoreConformance
import Testing

@_spi(StoreSupport) @testable import SyncCore

@Suite("JSONTextBuffer")
struct JSONTextBufferTests {
    @Test func textRoundTripsThroughTheParserInEitherMemberOrder() throws {
        var random = SeededRandom(seed: 42)
        var buffer = JSONTextBuffer(capacity: 8)
        for round in 0..<2000 {
            let value = RandomJSON.value(&random, depth: 0)
            buffer.removeAll()
            let problems = buffer.appendJSON(value, sortingKeys: round % 2 == 0)
            let text = buffer.array
            #expect(problems.isEmpty)
            #expect(try JSONValue(parsingUTF8: text) == value, "\(value)")
            if round % 2 == 0 { #expect(text == value.serializedUTF8()) }
        }
    }

    /// The count a push sizes its batches by is the text's length (a double's at most).
    @Test func theCountOfAValueIsTheLengthOfItsText() {
        var random = SeededRandom(seed: 7)
        for _ in 0..<2000 {
            let value = RandomJSON.value(&random, depth: 0)
            let length = value.serializedUTF8().count
            let count = JSONTextBuffer.count(ofJSON: value)
            if Self.holdsDouble(value) {
                #expect(count >= length, "\(value)")
            } else {
                #expect(count == length, "\(value)")
            }
        }
        let exact: [JSONValue] = [
            .string("q\"b\\n\n\r\t\u{0}\u{1F}é🎬"), .int(.min), .int(.max), .int(0), .int(-10), .null, .bool(false),
            .object(["": .array([]), "a\u{1}": .object([:]), "b": .array([.int(1), .string("")])]),
        ]
        for value in exact { #expect(JSONTextBuffer.count(ofJSON: value) == value.serializedUTF8().count, "\(value)") }
        // Nested past the parser's depth: the writer stops there, and so does the count.
        var deeper: JSONValue = 1
        for _ in 0..<2000 { deeper = [deeper] }
        #expect(JSONTextBuffer.count(ofJSON: deeper) == deeper.serializedUTF8().count)
        for number in [-2.2250738585072014e-308, 1e-300, -1.7976931348623157e308, 0.1, -0.0] {
            #expect(JSONTextBuffer.count(ofJSON: .double(number)) >= JSONValue.double(number).serializedUTF8().count)
        }
    }

    static func holdsDouble(_ value: JSONValue) -> Bool {
        switch value {
        case .double: true
        case .array(let elements): elements.contains(where: holdsDouble)
        case .object(let members): members.values.contains(where: holdsDouble)
        default: false
        }
    }

    @Test func integersAndStringsAreWrittenExactly() {
        for number in [Int64.min, Int64.max, 0, -1, 9, 10, -10, 1_234_567_890_123] {
            var buffer = JSONTextBuffer()
            buffer.appendInteger(number)
            let text = buffer.array
            #expect(String(decoding: text, as: UTF8.self) == String(number))
        }
        let cases: [(String, String)] = [
            ("q\"b\\n\n\r\t\u{0}\u{1F}é🎬", #""q\"b\\n\n\r\t\u0000\u001fé🎬""#),
            ("0123456789abcdef\"", #""0123456789abcdef\"""#),
            ("long text without escapes, é🎬", #""long text without escapes, é🎬""#),
            ("12345678\u{7F}\u{1}", "\"12345678\u{7F}\\u0001\""),
        ]
        for (text, expected) in cases {
            var buffer = JSONTextBuffer()
            buffer.appendJSONString(text)
            let written = buffer.array
            #expect(String(decoding: written, as: UTF8.self) == expected)
        }
    }

    /// Every length up to 40 bytes, with each kind of byte at each position: the word-at-a-time
    /// copy must agree with escaping byte by byte.
    @Test func stringsOfEveryLengthAreEscapedLikeByteByByte() {
        func reference(_ text: String) -> String {
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case _ where scalar.value < 0x20:
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
        var buffer = JSONTextBuffer(capacity: 8)
        var checked = 0
        for length in 0...40 {
            let plain = String((0..<length).map { Character(UnicodeScalar(UInt8(ascii: "a") + UInt8($0 % 26))) })
            buffer.removeAll()
            buffer.appendJSONString(plain)
            #expect(String(decoding: buffer.array, as: UTF8.self) == "\"" + plain + "\"")
            for position in 0..<max(length, 1) {
                for special in ["\"", "\\", "\n", "\u{0}", "\u{1F}", "\u{7F}", " ", "é", "~"] {
                    var characters = Array(plain)
                    if position < characters.count {
                        characters[position] = Character(special)
                    } else {
                        characters.append(Character(special))
                    }
                    let text = String(characters)
                    buffer.removeAll()
                    buffer.append(UInt8(ascii: "["))
                    buffer.appendJSONString(text)
                    buffer.append(UInt8(ascii: "]"))
                    let written = String(decoding: buffer.array, as: UTF8.self)
                    #expect(written == "[" + reference(text) + "]", "length \(length), position \(position)")
                    checked += 1
                }
            }
        }
        #expect(checked > 7_000)
    }

    @Test func problemsAreReported() {
        var buffer = JSONTextBuffer()
        let nonFinite = buffer.appendJSON(["a": [1, .double(.nan)]])
        let text = buffer.array
        #expect(nonFinite.nonFinite && !nonFinite.tooDeep)
        #expect(String(decoding: text, as: UTF8.self) == #"{"a":[1,null]}"#)

        var deep: JSONValue = 1
        for _ in 0..<JSONValue.maximumNestingDepth { deep = [deep] }
        buffer.removeAll()
        let atTheLimit = buffer.appendJSON(deep)
        #expect(atTheLimit.isEmpty)
        buffer.removeAll()
        let beyond = buffer.appendJSON([deep])
        #expect(beyond.tooDeep)

        // Writing stops at the parser's depth instead of recursing on.
        var deeper: JSONValue = 1
        for _ in 0..<2000 { deeper = [deeper] }
        buffer.removeAll()
        let stopped = buffer.appendJSON(deeper)
        let cut = String(decoding: buffer.array, as: UTF8.self)
        let limit = JSONValue.maximumNestingDepth
        #expect(stopped.tooDeep)
        #expect(cut == String(repeating: "[", count: limit) + "null" + String(repeating: "]", count: limit))
    }

    @Test func escapedNULIsFound() {
        var buffer = JSONTextBuffer()
        buffer.appendJSON(["a": "x\u{0}"])
        let escaped = buffer.containsEscapedNUL
        #expect(escaped)
        buffer.removeAll()
        buffer.appendJSON(["a": "u0000 and 0000", "b": [1, 2]])
        let plain = buffer.containsEscapedNUL
        #expect(!plain)
    }
}

/// Random JSON values with every kind of number, escape and nesting.
enum RandomJSON {
    static func value(_ random: inout SeededRandom, depth: Int) -> JSONValue {
        switch Int.random(in: 0..<(depth > 3 ? 6 : 9), using: &random) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &random))
        case 2: return .int([0, 1, -1, 10, Int64.max, Int64.min, 123_456].randomElement(using: &random)!)
        case 3:
            return .double(
                [0.5, -0.0, 1e300, 3.0, 1e-7, 123.456, 9_007_199_254_740_992.0].randomElement(using: &random)!)
        case 4, 5:
            return .string(
                ["", "a", "é", "🎬", "q\"", "back\\", "nl\n", "\u{0}", "\u{1F}x", "tab\t", "a longer string of text"]
                    .randomElement(using: &random)!)
        case 6:
            return .array((0..<Int.random(in: 0..<4, using: &random)).map { _ in value(&random, depth: depth + 1) })
        default:
            var object: JSONObject = [:]
            for key in ["k", "", "é\"", "\u{0}", "zeta", "alpha"].prefix(Int.random(in: 0..<6, using: &random)) {
                object[key] = value(&random, depth: depth + 1)
            }
            return .object(object)
        }
    }
}
