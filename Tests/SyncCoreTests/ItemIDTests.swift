import StoreConformance
import Testing

@testable import SyncCore

@Suite("Item ids")
struct ItemIDTests {
    @Test(arguments: [
        "a", "ID with spaces", "日本語", "émoji-🎉", "a.b", "...", "1234", String(repeating: "z", count: 255), "#x", "a'b",
    ])
    func validIDsPass(_ id: String) throws {
        try ItemID.validate(id)
        #expect(ItemID.isValid(id))
    }

    @Test(arguments: [
        ("", "empty"), (" ", "white space"), ("\t\n", "control"), ("a/b", "'/'"), ("a\\b", "'\\'"), ("a?b", "'?'"),
        ("a+b", "'+'"), ("a`b", "'`'"), ("a\"b", "'\"'"), (".", "reserved"), ("..", "reserved"), ("x\u{0}", "control"),
        ("x\u{7F}", "control"), ("x\u{9F}", "control"), (String(repeating: "z", count: 256), "longer than 255"),
    ])
    func invalidIDsFailWithAReason(_ id: String, _ phrase: String) {
        do {
            try ItemID.validate(id)
            Issue.record("\(id.debugDescription) should be invalid")
        } catch {
            #expect(error.description.contains(phrase), "\(error.description)")
        }
        #expect(!ItemID.isValid(id))
    }

    @Test func lengthCountsUTF16UnitsLikeTheLegacyClient() {
        // 128 emoji are 256 UTF-16 code units.
        #expect(!ItemID.isValid(String(repeating: "🎉", count: 128)))
        #expect(ItemID.isValid(String(repeating: "🎉", count: 127)))
    }

    @Test func generatedIDsAreValidUUIDv7AndStrictlyIncreasing() {
        var previous = ""
        for _ in 0..<10_000 {
            let id = ItemID.generate()
            #expect(id.count == 36)
            #expect(ItemID.isValid(id))
            #expect(Array(id)[14] == "7", "version nibble")
            #expect("89ab".contains(Array(id)[19]), "variant bits")
            #expect(id > previous)
            previous = id
        }
    }

    @Test func generatedIDsStayOrderedWhenTheCounterRunsOutWithinOneMillisecond() {
        let generator = UUIDv7Generator()
        var previous = ""
        for _ in 0..<10_000 {
            let id = generator.next(nowMilliseconds: 1_700_000_000_000)
            #expect(id > previous)
            previous = id
        }
        // The clock going backwards does not break the order either.
        #expect(generator.next(nowMilliseconds: 1_600_000_000_000) > previous)
    }

    @Test func generatedIDsCarryTheirMillisecondTimestamp() {
        let id = UUIDv7Generator().next(nowMilliseconds: 0x0123_4567_89AB)
        #expect(id.hasPrefix("01234567-89ab-7"))
    }
}

@Suite("ItemID fast path")
struct ItemIDFastPathTests {
    @Test func theASCIIFastPathAgreesWithTheGeneralRules() {
        var random = SeededRandom(seed: 7)
        var candidates = [
            "a", "item-1", "ID with spaces", "日本語", "émoji-🎉", "a.b", "...", "under_score", "x:y", "1234",
            String(repeating: "z", count: 255), "#hash", "percent%20", "~tilde", "a'b", "", " ", "   ", "\t", "a/b",
            "a\\b", "a?b", "a+b", "a`b", "a\"b", ".", "..", "nul\u{0}", "line\nbreak", "del\u{7F}", "c1\u{85}",
            String(repeating: "z", count: 256), "  x", ". ", " .", "a b",
        ]
        let alphabet = Array(" .+?`\"/\\azAZ09~-_\u{7F}\u{1F}\t") + (0x20..<0x80).map { Character(Unicode.Scalar($0)) }
        let plain = Array("abcxyz019-_. ")
        for _ in 0..<5000 {
            let length = Int.random(in: 0...6, using: &random)
            candidates.append(String((0..<length).map { _ in alphabet.randomElement(using: &random)! }))
            // Longer ids, mostly plain, with at most one other character: the eight-byte steps.
            var long = (0..<Int.random(in: 7...40, using: &random)).map { _ in plain.randomElement(using: &random)! }
            if Bool.random(using: &random) {
                long[Int.random(in: 0..<long.count, using: &random)] = alphabet.randomElement(using: &random)!
            }
            candidates.append(String(long))
        }
        var accepted = 0
        for id in candidates {
            let general = (try? ItemID.validateInGeneral(id)) != nil
            if ItemID.isValidASCII(id) {
                accepted += 1
                #expect(general, "fast path accepted \(id.debugDescription)")
            } else if id.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
                #expect(!general, "fast path refused valid \(id.debugDescription)")
            }
            #expect(ItemID.isValid(id) == general)
        }
        #expect(accepted > 3000)
    }
}
