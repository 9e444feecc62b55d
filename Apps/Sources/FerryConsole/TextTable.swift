import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Renders rows as an aligned plain-text table.
///
/// ```swift
/// print(TextTable.render(headers: ["id", "title"], rows: [["1", "Milk"], ["2", "Bread"]]))
/// // id  title
/// // ──  ─────
/// // 1   Milk
/// // 2   Bread
/// ```
public enum TextTable: Sendable {
    /// The table as lines joined by `\n` (no trailing newline). Line breaks and tabs in cells show
    /// as `⏎` and a space. Rows shorter than the headers are padded with empty cells. Widths are
    /// terminal columns: wide characters (CJK, emoji) count two. Nothing is cut unless asked: with
    /// `totalWidth` (a terminal's width), the widest columns are cut with `…` until each line fits,
    /// down to a few columns each; `maximumWidth` caps every cell.
    public static func render(
        headers: [String], rows: [[String]], maximumWidth: Int? = nil, totalWidth: Int? = nil
    ) -> String {
        let layout = Layout(headers: headers, rows: rows, maximumWidth: maximumWidth, totalWidth: totalWidth)
        let widths = layout.widths
        func line(_ cells: [String]) -> String {
            var text = ""
            for (column, cell) in cells.enumerated() {
                let shown = truncated(cell, to: widths[column])
                let isLast = column == cells.count - 1
                text += isLast ? shown : shown + String(repeating: " ", count: widths[column] - displayWidth(shown) + 2)
            }
            return text
        }
        var lines = [line(layout.head), line(widths.map { String(repeating: "─", count: max(1, $0)) })]
        lines += layout.body.map(line)
        return lines.joined(separator: "\n")
    }

    /// Whether ``render(headers:rows:maximumWidth:totalWidth:)`` cuts some cell: then a command
    /// says how to see it whole.
    public static func cutsCells(
        headers: [String], rows: [[String]], maximumWidth: Int? = nil, totalWidth: Int? = nil
    ) -> Bool {
        let layout = Layout(headers: headers, rows: rows, maximumWidth: maximumWidth, totalWidth: totalWidth)
        return layout.widths != layout.natural
    }

    /// The cells, cleaned, and the width of each column: as wide as its widest cell (`natural`),
    /// then capped and fitted (`widths`).
    private struct Layout {
        var head: [String]
        var body: [[String]]
        var natural: [Int]
        var widths: [Int]

        init(headers: [String], rows: [[String]], maximumWidth: Int?, totalWidth: Int?) {
            let columns = max(headers.count, rows.map(\.count).max() ?? 0)
            head = (0..<columns).map { $0 < headers.count ? clean(headers[$0]) : "" }
            body = rows.map { row in (0..<columns).map { $0 < row.count ? clean(row[$0]) : "" } }
            natural = head.map(displayWidth)
            for row in body {
                for (column, cell) in row.enumerated() { natural[column] = max(natural[column], displayWidth(cell)) }
            }
            let limit = maximumWidth.map { max(2, $0) } ?? Int.max
            widths = natural.map { min(limit, $0) }
            if let totalWidth { fit(&widths, into: totalWidth) }
        }
    }

    /// One record per block, a field per line (`psql`'s expanded view): for rows too wide for a table.
    ///
    /// ```
    /// -[ 1 ]--------
    /// id     milk
    /// title  Milk
    /// ```
    public static func renderExpanded(headers: [String], rows: [[String]], totalWidth: Int? = nil) -> String {
        let headers = headers.map(clean)
        let nameWidth = headers.map(displayWidth).max() ?? 0
        let valueWidth = totalWidth.map { max(8, $0 - nameWidth - 2) }
        var lines: [String] = []
        for (index, row) in rows.enumerated() {
            let label = "-[ \(index + 1) ]"
            lines.append(label + String(repeating: "-", count: max(4, min(40, nameWidth + 12) - label.count)))
            for (column, header) in headers.enumerated() {
                var value = column < row.count ? clean(row[column]) : ""
                if let valueWidth { value = truncated(value, to: valueWidth) }
                lines.append(header + String(repeating: " ", count: nameWidth - displayWidth(header) + 2) + value)
            }
        }
        return lines.joined(separator: "\n")
    }

    /// The columns a terminal gives `text`: wide characters (East Asian wide and full-width, emoji)
    /// two, combining marks and zero-width characters none, others one.
    /// Colour sequences (`ESC [ … m`) take no columns.
    public static func displayWidth(_ text: String) -> Int {
        var total = 0
        var inEscape = false
        var sawBracket = false
        for character in text {
            if inEscape {
                if !sawBracket {
                    sawBracket = character == "["
                    if !sawBracket { inEscape = false }
                } else if let ascii = character.asciiValue, ascii >= 0x40, ascii <= 0x7E {
                    inEscape = false
                }
                continue
            }
            if character == "\u{1B}" {
                inEscape = true
                sawBracket = false
                continue
            }
            total += width(of: character)
        }
        return total
    }

    static func width(of character: Character) -> Int {
        guard let first = character.unicodeScalars.first else { return 0 }
        if character.unicodeScalars.contains(where: { $0.properties.isEmojiPresentation })
            || character.unicodeScalars.contains(where: { $0.value == 0xFE0F })
        {
            return 2
        }
        switch first.value {
        case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
            0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x20000...0x3FFFD:
            return 2
        case 0x200B...0x200F, 0x2060...0x2064:
            return 0
        default:
            switch first.properties.generalCategory {
            case .nonspacingMark, .enclosingMark, .format, .control: return 0
            default: return 1
            }
        }
    }

    /// `text` cut to `columns` terminal columns, ending in `…` when cut.
    static func truncated(_ text: String, to columns: Int) -> String {
        guard displayWidth(text) > columns else { return text }
        var result = ""
        var used = 0
        for character in text {
            let next = width(of: character)
            if used + next > columns - 1 { break }
            result.append(character)
            used += next
        }
        return result + "…"
    }

    /// `cell` as terminal text: line breaks as `⏎`, tabs as a space, and no character that a
    /// terminal obeys instead of showing: a C0 control is shown as its control picture (ESC as
    /// `␛`, so a value cannot clear the screen, retitle the window or recolour what follows), and
    /// C1 controls and bidirectional overrides (which reorder the rest of the line) as `�`.
    public static func clean(_ cell: String) -> String {
        var text = ""
        for character in cell {
            switch character {
            case "\n", "\r\n", "\r": text.append("⏎")
            case "\t": text.append(" ")
            default:
                guard character.unicodeScalars.contains(where: Self.isObeyed) else {
                    text.append(character)
                    continue
                }
                for scalar in character.unicodeScalars {
                    switch scalar.value {
                    case 0..<0x20: text.unicodeScalars.append(Unicode.Scalar(0x2400 + scalar.value)!)
                    case 0x7F: text.append("␡")
                    case _ where Self.isObeyed(scalar): text.append("\u{FFFD}")
                    default: text.unicodeScalars.append(scalar)
                    }
                }
            }
        }
        return text
    }

    /// Whether a terminal acts on `scalar` rather than showing it.
    private static func isObeyed(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.generalCategory == .control || scalar.properties.isBidiControl
    }

    /// Narrows the widest columns until the line (with two spaces between columns) fits `total`.
    private static func fit(_ widths: inout [Int], into total: Int) {
        let minimum = 4
        func lineWidth() -> Int { widths.reduce(0, +) + 2 * max(0, widths.count - 1) }
        while lineWidth() > total {
            guard let widest = widths.indices.max(by: { widths[$0] < widths[$1] }), widths[widest] > minimum else {
                return
            }
            widths[widest] -= 1
        }
    }
}

/// The terminal's size, when output goes to one.
public enum TerminalSize: Sendable {
    /// The width in columns of the terminal on `descriptor`, or `nil` when it is not a terminal
    /// (`$COLUMNS`, when set and `readingEnvironment`, overrides the terminal's own width; a line
    /// editor reads the terminal itself, since `$COLUMNS` does not follow a resize).
    public static func width(of descriptor: Int32 = 1, readingEnvironment: Bool = true) -> Int? {
        guard isatty(descriptor) == 1 else { return nil }
        if readingEnvironment, let text = ProcessInfo.processInfo.environment["COLUMNS"], let columns = Int(text),
            columns > 0
        {
            return columns
        }
        var size = winsize()
        guard ioctl(descriptor, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }
}
