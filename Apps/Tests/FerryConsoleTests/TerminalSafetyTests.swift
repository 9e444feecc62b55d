import FerryConsole
import Testing

/// Values that come from a server are shown, never obeyed: a table cell or a field name with an
/// escape sequence could clear the screen, retitle the window or recolour what follows, and a
/// bidirectional override could reorder the rest of the line (a probe with a hostile server).
@Suite("Tables on a terminal show control characters")
struct TerminalSafetyTests {
    static let hostile = "a\u{1B}[2Jb\u{07}c\u{1B}]0;pwned\u{07}d\u{202E}e\u{9B}f\u{7F}"

    @Test func cellsAndHeadersHoldNoCharacterATerminalObeys() {
        for text in [
            TextTable.render(headers: ["id", Self.hostile], rows: [["1", Self.hostile]]),
            TextTable.renderExpanded(headers: ["id", Self.hostile], rows: [["1", Self.hostile]]),
        ] {
            let obeyed = text.unicodeScalars.filter {
                ($0.properties.generalCategory == .control && $0 != "\n") || $0.properties.isBidiControl
            }
            #expect(obeyed.isEmpty, "\(obeyed.map { String($0.value, radix: 16) })")
            #expect(text.contains("a␛[2Jb␇c␛]0;pwned␇d\u{FFFD}e\u{FFFD}f␡"), "\(text)")
        }
    }

    @Test func ordinaryTextIsUnchanged() {
        let text = TextTable.render(headers: ["title"], rows: [["Crème brûlée 🍮 — 東京"]])
        #expect(text.contains("Crème brûlée 🍮 — 東京"))
    }
}
