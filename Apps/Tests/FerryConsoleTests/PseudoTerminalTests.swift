import FerryConsole
import Foundation
import ServerTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The line editor on a real pseudo-terminal 20 columns wide, its output replayed on a small
/// terminal model: long lines wrap over several rows and redraw in place, wide characters keep the
/// cursor right.
@Suite("Line editor on a pseudo-terminal", .timeLimit(.minutes(10)))
struct PseudoTerminalTests {
    /// A pseudo-terminal pair: the editor gets the terminal side, the test types into the other.
    struct PseudoTerminal {
        let controller: Int32
        let terminal: Int32

        init(columns: UInt16) throws {
            // /dev/ptmx, unlocked, and its /dev/pts/N (Linux: TIOCSPTLCK and TIOCGPTN, which Swift
            // cannot import from their macros).
            controller = open("/dev/ptmx", O_RDWR | O_NOCTTY)
            guard controller >= 0 else { throw Failure(description: "no /dev/ptmx") }
            var unlock: Int32 = 0
            var number: UInt32 = 0
            guard ioctl(controller, 0x4004_5431, &unlock) == 0, ioctl(controller, 0x8004_5430, &number) == 0 else {
                throw Failure(description: "cannot unlock the pseudo-terminal")
            }
            terminal = open("/dev/pts/\(number)", O_RDWR | O_NOCTTY)
            guard terminal >= 0 else { throw Failure(description: "cannot open the terminal side") }
            var size = winsize(ws_row: 40, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0)
            _ = ioctl(controller, UInt(TIOCSWINSZ), &size)
        }

        func type(_ text: String) {
            let bytes = Array(text.utf8)
            _ = bytes.withUnsafeBytes { write(controller, $0.baseAddress, $0.count) }
        }

        /// Everything the editor wrote so far.
        func drain() -> [UInt8] {
            var output: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                var poller = pollfd(fd: controller, events: Int16(POLLIN), revents: 0)
                guard poll(&poller, 1, 300) > 0 else { return output }
                let count = read(controller, &buffer, buffer.count)
                if count <= 0 { return output }
                output += buffer[0..<count]
            }
        }

        func close() {
            closeDescriptor(terminal)
            closeDescriptor(controller)
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// A terminal model: printable characters (wide ones take two cells) with wrapping at the right
    /// margin, CR, LF, and the cursor and erase sequences the editor uses.
    struct Screen {
        let width: Int
        var rows: [[String]] = [[]]
        var row = 0
        var column = 0

        init(width: Int) { self.width = width }

        mutating func ensureRow() {
            while rows.count <= row { rows.append([]) }
        }

        mutating func put(_ character: Character) {
            let cells = TextTable.displayWidth(String(character))
            if column + cells > width {
                row += 1
                column = 0
            }
            ensureRow()
            while rows[row].count < column + cells { rows[row].append(" ") }
            rows[row][column] = String(character)
            if cells == 2 { rows[row][column + 1] = "" }
            column += cells
        }

        mutating func feed(_ text: String) {
            var characters = Array(text)[...]
            while let character = characters.popFirst() {
                switch character {
                case "\r": column = 0
                case "\n", "\r\n":
                    if character == "\r\n" { column = 0 }
                    row += 1
                    ensureRow()
                case "\u{1B}":
                    guard characters.first == "[" else { continue }
                    characters.removeFirst()
                    var number = ""
                    while let next = characters.first, next.isNumber || next == ";" {
                        number.append(next)
                        characters.removeFirst()
                    }
                    guard let command = characters.popFirst() else { return }
                    let count = Int(number) ?? 1
                    column = min(column, width - 1)
                    switch command {
                    case "A": row = max(0, row - count)
                    case "B":
                        row += count
                        ensureRow()
                    case "C": column = min(width - 1, column + count)
                    case "D": column = max(0, column - count)
                    case "K": rows[row] = Array(rows[row].prefix(column))
                    case "J":
                        rows[row] = Array(rows[row].prefix(column))
                        rows = Array(rows.prefix(row + 1))
                    case "H":
                        row = 0
                        column = 0
                    default: break
                    }
                default: put(character)
                }
            }
        }

        /// The visible text of each row, trailing spaces removed.
        var lines: [String] {
            rows.map { $0.joined().replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression) }
        }
    }

    /// `text` as a terminal `width` columns wide lays it out.
    static func layout(_ text: String, width: Int) -> [String] {
        var lines = [""]
        var used = 0
        for character in text {
            let cells = TextTable.displayWidth(String(character))
            if used + cells > width {
                lines.append("")
                used = 0
            }
            lines[lines.count - 1].append(character)
            used += cells
        }
        return lines.map { $0.replacingOccurrences(of: "\\s+$", with: "", options: .regularExpression) }
    }

    @Test func longLinesWrapAndRedrawInPlace() async throws {
        let width = 20
        // A line three rows long; back three characters, insert, submit.
        let typed = #"insert todo {"title":"東京 tower 🗼 trip"}"#
        let (screens, line) = try await Self.session(width: width, keys: [typed, "\u{1B}[D\u{1B}[D\u{1B}[D", "X"])
        let expected = #"insert todo {"title":"東京 tower 🗼 triXp"}"#
        #expect(line == expected)

        let screen = screens[screens.count - 2]
        let shown = Self.layout("ferry> " + expected, width: width)
        #expect(Array(screen.lines.prefix(shown.count)) == shown, "\(screen.lines)")
        #expect(screen.lines.dropFirst(shown.count).allSatisfy { $0.isEmpty }, "\(screen.lines)")
        // The prompt is on the screen once: every redraw went back to the first row.
        #expect(screen.lines.joined().components(separatedBy: "ferry>").count == 2, "\(screen.lines)")
        // The cursor sits on the character after the inserted X.
        let before = TextTable.displayWidth("ferry> " + #"insert todo {"title":"東京 tower 🗼 triX"#)
        #expect(screen.row == before / width && screen.column == before % width, "\(screen.row):\(screen.column)")
        // After Enter the cursor is below the whole line.
        let entered = try #require(screens.last)
        #expect(entered.row == shown.count && entered.column == 0)
    }

    /// Types `keys` one group at a time into an editor on a terminal `width` columns wide, then
    /// Enter, and returns the screen after each group and after Enter (after `resize`, the terminal
    /// is that wide from then on). The editor reads on a thread of its own; the test types and
    /// drains the terminal (blocking polls) on another: neither holds a thread of the cooperative
    /// pool.
    static func session(width: Int, keys: [String], resize: (after: Int, columns: Int)? = nil) async throws -> (
        screens: [Screen], line: String?
    ) {
        let pty = try PseudoTerminal(columns: UInt16(width))
        defer { pty.close() }
        let editor = LineEditor(input: pty.terminal, output: pty.terminal)
        return try await offThePool {
            let result = Mutex<String?>(nil)
            let done = DispatchSemaphore(value: 0)
            Thread {
                let line = editor.readLine(prompt: "ferry> ")
                result.withLock { $0 = line }
                done.signal()
            }.start()
            var transcript: [UInt8] = []
            for _ in 0..<50 where !String(decoding: transcript, as: UTF8.self).contains("ferry> ") {
                transcript += pty.drain()
            }
            var screen = Screen(width: width)
            screen.feed(String(decoding: transcript, as: UTF8.self))
            var screens: [Screen] = []
            for (index, group) in keys.enumerated() {
                pty.type(group)  // the editor still reads and redraws one key at a time
                screen.feed(String(decoding: pty.drain(), as: UTF8.self))
                screens.append(screen)
                if let resize, resize.after == index {
                    var size = winsize(ws_row: 40, ws_col: UInt16(resize.columns), ws_xpixel: 0, ws_ypixel: 0)
                    _ = ioctl(pty.controller, UInt(TIOCSWINSZ), &size)
                    // A terminal that shrinks keeps its rows as they were; the model starts clean.
                    screen = Screen(width: resize.columns)
                }
            }
            pty.type("\r")
            let ended = done.wait(timeout: .now() + 10) == .success
            screen.feed(String(decoding: pty.drain(), as: UTF8.self))
            screens.append(screen)
            return (screens, ended ? result.withLock { $0 } : "the editor did not return")
        }
    }

    /// A line whose wide character straddles the right edge: the terminal moves it to the next row
    /// and leaves the last column empty, so every row after it holds one column less than a count
    /// of the line's width says. Rows: the prompt and 12 "a" (19 columns), "東" and 18 "a" (a full
    /// row), then "abc".
    static let straddling = String(repeating: "a", count: 12) + "東" + String(repeating: "a", count: 19) + "bc"

    /// Issue 32: a wide character that does not fit at the right edge goes to the next row; the
    /// editor counted it on the row before, lost track of its rows and drew the first row twice.
    @Test func aWideCharacterAtTheRightEdgeDoesNotDuplicateARow() async throws {
        let (screens, line) = try await Self.session(
            width: 20, keys: [Self.straddling, "\u{1B}[D\u{1B}[D\u{1B}[D", "X", "Y"])
        let expected = String(repeating: "a", count: 12) + "東" + String(repeating: "a", count: 18) + "XYabc"
        #expect(line == expected)
        let rows = ["ferry> " + String(repeating: "a", count: 12), "東" + String(repeating: "a", count: 18), "XYabc"]
        for screen in screens.dropFirst(2).map(\.lines) {
            #expect(screen.joined().components(separatedBy: "ferry>").count == 2, "\(screen)")
        }
        let last = screens[screens.count - 2].lines
        #expect(Array(last.prefix(3)) == rows, "\(last)")
        #expect(last.dropFirst(3).allSatisfy { $0.isEmpty }, "\(last)")
    }

    /// Issue 32: Ctrl-U then Ctrl-L left old text on the screen, on such a line.
    @Test func killingTheLineThenClearingLeavesOnlyThePrompt() async throws {
        let (screens, line) = try await Self.session(
            width: 20, keys: [Self.straddling, "d", "\u{15}", "\u{0C}", "push"])
        #expect(line == "push")
        let killed = screens[2].lines
        #expect(killed.first == "ferry>", "\(killed)")
        #expect(killed.dropFirst().allSatisfy { $0.isEmpty }, "\(killed)")
        let cleared = screens[3].lines
        #expect(cleared.first == "ferry>" && cleared.dropFirst().allSatisfy { $0.isEmpty }, "\(cleared)")
        #expect(screens[4].lines.first == "ferry> push", "\(screens[4].lines)")
    }

    /// A resize is followed: the line is laid out at the new width at the next key.
    @Test func aResizedTerminalIsMeasuredAgain() async throws {
        let (screens, line) = try await Self.session(
            width: 20, keys: [String(repeating: "a", count: 20), "b"], resize: (after: 0, columns: 30))
        #expect(line == String(repeating: "a", count: 20) + "b")
        let after = screens[screens.count - 2].lines
        #expect(after.contains("ferry> " + String(repeating: "a", count: 20) + "b"), "\(after)")
    }
}

private func closeDescriptor(_ descriptor: Int32) { _ = close(descriptor) }
