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
