import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads lines from the terminal with editing, history and Tab completion; from a pipe or file
/// it reads plain lines, so sessions can be scripted.
///
/// Keys: ←/→ (Ctrl-B/F), Alt-←/→ by word, Home/End (Ctrl-A/E), Backspace, Delete, ↑/↓ (Ctrl-P/N)
/// history, Tab completion, Ctrl-K/U/W delete, Ctrl-L clear, Ctrl-C drop the line, Ctrl-D on an
/// empty line ends input. A line longer than the terminal is wide wraps onto the next rows and is
/// redrawn in place; wide characters (CJK, emoji) count two columns.
///
/// ```swift
/// let editor = LineEditor(historyFile: home + "/.ferry_history") { line, word in
///     ["status", "pull", "push"].filter { $0.hasPrefix(word) }
/// }
/// while let line = editor.readLine(prompt: "ferry> ") { run(line) }
/// ```
public final class LineEditor: @unchecked Sendable {
    /// Candidates for the word before the cursor: `(line so far, word)`.
    public typealias Completer = @Sendable (_ line: String, _ word: String) -> [String]

    private let completer: Completer?
    private let historyFile: String?
    private var history: History
    private let input: Int32
    private let output: Int32
    private let lock = NSLock()

    /// Whether input comes from a terminal (then lines are edited; otherwise read as they are).
    public let isInteractive: Bool

    public init(
        historyFile: String? = nil, input: Int32 = 0, output: Int32 = 1,
        completer: Completer? = nil
    ) {
        self.completer = completer
        self.historyFile = historyFile
        self.input = input
        self.output = output
        isInteractive = isatty(input) == 1 && isatty(output) == 1
        var loaded: [String] = []
        if let historyFile, let text = try? String(contentsOfFile: historyFile, encoding: .utf8) {
            loaded = text.split(separator: "\n").map(String.init)
        }
        history = History(loaded)
    }

    /// The next line, read on a thread of its own: the wait for the user never holds a thread of
    /// the cooperative pool, so the work that goes on meanwhile (automatic sync, a feed) runs.
    ///
    /// ```swift
    /// while let line = await editor.line(prompt: "ferry> ") { try await run(line) }
    /// ```
    public func line(prompt: String) async -> String? {
        await withCheckedContinuation { continuation in
            let reader = Thread { continuation.resume(returning: self.readLine(prompt: prompt)) }
            reader.name = "ferry.terminal"
            reader.start()
        }
    }

    /// The next line without its newline, or `nil` at the end of input (Ctrl-D, end of file). It
    /// blocks the calling thread: from async code, use ``line(prompt:)``.
    public func readLine(prompt: String) -> String? {
        lock.lock()
        defer { lock.unlock() }
        guard isInteractive else { return readPlainLine() }
        guard let saved = enterRawMode() else { return readPlainLine(prompt: prompt) }
        defer { restore(saved) }
        var buffer = EditBuffer(history: history)
        var decoder = KeyDecoder()
        cursorRow = 0
        redraw(prompt, buffer)
        var byte: UInt8 = 0
        while true {
            let count = read(input, &byte, 1)
            if count <= 0 {
                write("\r\n")
                return nil
            }
            for key in decoder.feed([byte]) {
                switch buffer.apply(key) {
                case .editing:
                    redraw(prompt, buffer)
                case .submit(let line):
                    moveToEnd(prompt, buffer)
                    write("\r\n")
                    history = buffer.currentHistory
                    saveHistory()
                    return line
                case .cancel:
                    write("^C\r\n")
                    cursorRow = 0
                    redraw(prompt, buffer)
                case .endOfInput:
                    moveToEnd(prompt, buffer)
                    write("\r\n")
                    return nil
                case .clearScreen:
                    write("\u{1B}[H\u{1B}[2J")
                    cursorRow = 0
                    redraw(prompt, buffer)
                case .complete:
                    complete(&buffer, prompt: prompt)
                }
            }
        }
    }

    private func complete(_ buffer: inout EditBuffer, prompt: String) {
        guard let completer else { return }
        let word = buffer.wordBeforeCursor.text
        let (matches, prefix) = Completion.complete(word, among: completer(buffer.text, word))
        if matches.count == 1 {
            buffer.replaceWordBeforeCursor(with: matches[0] + " ")
        } else if prefix.count > word.count {
            buffer.replaceWordBeforeCursor(with: prefix)
        } else if matches.count > 1 {
            moveToEnd(prompt, buffer)
            write("\r\n" + matches.joined(separator: "  ") + "\r\n")
            cursorRow = 0
        }
        redraw(prompt, buffer)
    }

    /// The row of the cursor, counted from the prompt's first row, as the last redraw left it.
    private var cursorRow = 0

    private var terminalWidth: Int { TerminalSize.width(of: output, readingEnvironment: false) ?? 80 }

    /// Draws the prompt and the line from the prompt's first row, over as many rows as the line
    /// takes at the terminal's width (measured at each redraw, so a resize is followed), and puts
    /// the cursor on its character.
    private func redraw(_ prompt: String, _ buffer: EditBuffer) {
        let width = max(2, terminalWidth)
        let text = buffer.text
        var out = cursorRow > 0 ? "\u{1B}[\(cursorRow)A" : ""
        out += "\r\u{1B}[J" + prompt + text
        let end = Self.place(prompt + text, next: nil, width: width)
        if end.pendingWrap {
            // At the right margin the terminal has not wrapped yet: wrap now so the rows are known.
            out += "\r\n"
        }
        let characters = Array(text)
        let next = buffer.cursor < characters.count ? characters[buffer.cursor] : nil
        let cursor = Self.place(prompt + String(characters.prefix(buffer.cursor)), next: next, width: width)
        if end.row > cursor.row { out += "\u{1B}[\(end.row - cursor.row)A" }
        out += "\r"
        if cursor.column > 0 { out += "\u{1B}[\(cursor.column)C" }
        cursorRow = cursor.row
        write(out)
    }

    /// Where the cursor stands after `text` is written from the first column of a terminal `width`
    /// columns wide, as terminals wrap: a character that does not fit in what is left of a row
    /// goes to the next one (a wide character at the last column leaves that column empty). With
    /// `next`, the place is where that character will be drawn. `pendingWrap`: the text ends
    /// exactly at the right margin, where a terminal keeps the cursor until the next character.
    static func place(_ text: String, next: Character?, width: Int) -> (row: Int, column: Int, pendingWrap: Bool) {
        var row = 0
        var column = 0
        for character in text {
            let cells = TextTable.displayWidth(String(character))
            if column + cells > width {
                row += 1
                column = 0
            }
            column += cells
        }
        let following = next.map { TextTable.displayWidth(String($0)) } ?? 1
        if column + following > width && column > 0 {
            return (row + 1, 0, next == nil && column == width)
        }
        return (row, column, false)
    }

    /// Puts the cursor after the last character of the line, for what is written below it.
    private func moveToEnd(_ prompt: String, _ buffer: EditBuffer) {
        let width = max(2, terminalWidth)
        let end = Self.place(prompt + buffer.text, next: nil, width: width)
        if end.row > cursorRow { write("\u{1B}[\(end.row - cursorRow)B") }
        cursorRow = end.row
    }

    private var pending: [UInt8] = []
    private var reachedEnd = false

    /// A line from `input` as it is (a pipe, a file, or a terminal we could not switch to raw mode).
    private func readPlainLine(prompt: String? = nil) -> String? {
        if let prompt { write(prompt) }
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while true {
            if let newline = pending.firstIndex(of: 0x0A) {
                var line = Array(pending[..<newline])
                pending.removeSubrange(...newline)
                if line.last == 0x0D { line.removeLast() }
                return String(decoding: line, as: UTF8.self)
            }
            if reachedEnd {
                guard !pending.isEmpty else { return nil }
                defer { pending = [] }
                return String(decoding: pending, as: UTF8.self)
            }
            let count = read(input, &chunk, chunk.count)
            if count <= 0 {
                reachedEnd = true
            } else {
                pending += chunk[0..<count]
            }
        }
    }

    private func saveHistory() {
        guard let historyFile else { return }
        let text = history.entries.joined(separator: "\n") + "\n"
        try? text.write(toFile: historyFile, atomically: true, encoding: .utf8)
    }

    private func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes {
                Foundation.write(output, $0.baseAddress! + offset, $0.count - offset)
            }
            if written <= 0 { return }
            offset += written
        }
    }

    private func enterRawMode() -> termios? {
        var original = termios()
        guard tcgetattr(input, &original) == 0 else { return nil }
        var raw = original
        raw.c_iflag &= ~tcflag_t(BRKINT | ICRNL | INPCK | ISTRIP | IXON)
        raw.c_lflag &= ~tcflag_t(ECHO | ICANON | IEXTEN | ISIG)
        raw.c_cflag |= tcflag_t(CS8)
        guard tcsetattr(input, TCSAFLUSH, &raw) == 0 else { return nil }
        return original
    }

    private func restore(_ saved: termios) {
        var saved = saved
        _ = tcsetattr(input, TCSAFLUSH, &saved)
    }
}
