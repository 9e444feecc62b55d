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
    /// The table as lines joined by `\n` (no trailing newline). Cells are cut to `maximumWidth`
    /// characters with `…`; line breaks and tabs in cells show as `⏎` and a space. Rows shorter
    /// than the headers are padded with empty cells.
    public static func render(headers: [String], rows: [[String]], maximumWidth: Int = 40) -> String {
        let limit = max(2, maximumWidth)
        let clean = { (cell: String) -> String in
            var text = ""
            for character in cell {
                switch character {
                case "\n", "\r\n", "\r": text.append("⏎")
                case "\t": text.append(" ")
                default: text.append(character)
                }
            }
            return text.count > limit ? String(text.prefix(limit - 1)) + "…" : text
        }
        let columns = max(headers.count, rows.map(\.count).max() ?? 0)
        let head = (0..<columns).map { $0 < headers.count ? clean(headers[$0]) : "" }
        let body = rows.map { row in (0..<columns).map { $0 < row.count ? clean(row[$0]) : "" } }
        var widths = head.map(\.count)
        for row in body {
            for (column, cell) in row.enumerated() { widths[column] = max(widths[column], cell.count) }
        }
        func line(_ cells: [String]) -> String {
            var text = ""
            for (column, cell) in cells.enumerated() {
                let isLast = column == cells.count - 1
                text += isLast ? cell : cell + String(repeating: " ", count: widths[column] - cell.count + 2)
            }
            return text
        }
        var lines = [line(head), line(widths.map { String(repeating: "─", count: max(1, $0)) })]
        lines += body.map(line)
        return lines.joined(separator: "\n")
    }
}
