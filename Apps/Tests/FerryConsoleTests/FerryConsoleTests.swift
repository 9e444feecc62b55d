import FerryConsole
import Testing

@Suite("Line editing", .timeLimit(.minutes(10)))
struct LineEditingTests {
    @Test func decodesCharactersControlKeysAndEscapeSequences() {
        var decoder = KeyDecoder()
        #expect(decoder.feed(Array("aé".utf8)) == [.character("a"), .character("é")])
        #expect(decoder.feed([0x1B, 0x5B, 0x41, 0x1B, 0x5B, 0x44]) == [.up, .left])
        #expect(decoder.feed([0x1B, 0x4F, 0x43]) == [.right])
        #expect(decoder.feed(Array("\u{1B}[3~\u{1B}[1;5D\u{1B}[H\u{1B}[4~".utf8)) == [.delete, .wordLeft, .home, .end])
        #expect(
            decoder.feed([0x01, 0x05, 0x03, 0x04, 0x7F, 0x09, 0x0D, 0x0B, 0x15, 0x17, 0x0C])
                == [
                    .home, .end, .interrupt, .endOfInput, .backspace, .tab, .enter, .killToEnd, .killToStart,
                    .deleteWordBefore, .clearScreen,
                ])
    }

    @Test func waitsForTheRestOfASplitSequence() {
        var decoder = KeyDecoder()
        #expect(decoder.feed([0x1B]) == [])
        #expect(decoder.feed([0x5B]) == [])
        #expect(decoder.feed([0x42]) == [.down])
        let snowman = Array("☃".utf8)
        #expect(decoder.feed([snowman[0]]) == [])
        #expect(decoder.feed(Array(snowman[1...])) == [.character("☃")])
        #expect(decoder.feed([0x1B]) == [])
        #expect(decoder.flush() == [.unknown])
    }

    @Test func editsInTheMiddleOfTheLine() {
        var buffer = EditBuffer()
        for character in "pll todo" { _ = buffer.apply(.character(character)) }
        for _ in 0..<7 { _ = buffer.apply(.left) }
        _ = buffer.apply(.character("u"))
        #expect(buffer.text == "pull todo")
        #expect(buffer.cursor == 2)
        _ = buffer.apply(.end)
        _ = buffer.apply(.deleteWordBefore)
        #expect(buffer.text == "pull ")
        #expect(buffer.killed == "todo")
        _ = buffer.apply(.home)
        _ = buffer.apply(.delete)
        #expect(buffer.text == "ull ")
        _ = buffer.apply(.wordRight)
        #expect(buffer.cursor == 3)
        _ = buffer.apply(.killToStart)
        #expect(buffer.text == " ")
        _ = buffer.apply(.killToEnd)
        #expect(buffer.text == "")
        #expect(buffer.apply(.endOfInput) == .endOfInput)
    }

    @Test func submitsCancelsAndWalksTheHistory() {
        var buffer = EditBuffer(history: History(["status"]))
        for character in "pull" { _ = buffer.apply(.character(character)) }
        #expect(buffer.apply(.enter) == .submit("pull"))
        for character in "dra" { _ = buffer.apply(.character(character)) }
        _ = buffer.apply(.up)
        #expect(buffer.text == "pull")
        _ = buffer.apply(.up)
        #expect(buffer.text == "status")
        _ = buffer.apply(.up)
        #expect(buffer.text == "status")
        _ = buffer.apply(.down)
        #expect(buffer.text == "pull")
        _ = buffer.apply(.down)
        #expect(buffer.text == "dra")
        #expect(buffer.apply(.interrupt) == .cancel)
        #expect(buffer.text == "")
        #expect(buffer.currentHistory.entries == ["status", "pull"])
    }

    @Test func historySkipsBlanksAndRepeatsAndKeepsItsLimit() {
        var history = History(limit: 3)
        for line in ["a", "a", "  ", "b", "c", "d"] { history.add(line) }
        #expect(history.entries == ["b", "c", "d"])
    }

    @Test func completesTheWordBeforeTheCursor() {
        let commands = ["pull", "purge", "push", "query", "status"]
        #expect(Completion.complete("pu", among: commands) == (["pull", "purge", "push"], "pu"))
        #expect(Completion.complete("pus", among: commands) == (["push"], "push"))
        #expect(Completion.complete("x", among: commands).matches.isEmpty)
        #expect(Completion.complete("", among: ["todo", "tags"]) == (["tags", "todo"], "t"))
        var buffer = EditBuffer()
        for character in "pull to" { _ = buffer.apply(.character(character)) }
        #expect(buffer.wordBeforeCursor.text == "to")
        buffer.replaceWordBeforeCursor(with: "todo ")
        #expect(buffer.text == "pull todo ")
    }
}

@Suite("Text tables", .timeLimit(.minutes(10)))
struct TextTableTests {
    @Test func alignsColumnsAndCutsLongCells() {
        let table = TextTable.render(
            headers: ["id", "title", "done"], rows: [["1", "Milk", "false"], ["22", "A\nvery long title", "true"]],
            maximumWidth: 10)
        #expect(
            table == """
                id  title       done
                ──  ──────────  ─────
                1   Milk        false
                22  A⏎very lo…  true
                """)
    }

    @Test func padsShortRows() {
        #expect(TextTable.render(headers: ["a", "b"], rows: [["x"]]) == "a  b\n─  ─\nx  ")
    }
}
