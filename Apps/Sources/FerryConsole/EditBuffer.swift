/// The line being edited, the cursor, and what each key does to them: the part of the line editor
/// that involves no terminal, so it can be tested key by key.
///
/// ```swift
/// var buffer = EditBuffer()
/// for key in [Key.character("h"), .character("i"), .left, .character("!")] { _ = buffer.apply(key) }
/// buffer.text    // "h!i"
/// buffer.cursor  // 2
/// ```
public struct EditBuffer: Sendable {
    /// What a key did.
    public enum Outcome: Sendable, Equatable {
        /// Keep editing.
        case editing
        /// Enter: the line is done.
        case submit(String)
        /// Ctrl-C: drop the line.
        case cancel
        /// Ctrl-D on an empty line: no more input.
        case endOfInput
        /// Tab: the caller completes the word before the cursor.
        case complete
        /// Ctrl-L: the caller clears the screen.
        case clearScreen
    }

    private(set) var characters: [Character] = []
    /// The cursor, in characters from the start.
    public private(set) var cursor = 0
    /// Text Ctrl-K, Ctrl-U or Ctrl-W removed last (not reinserted by this editor, kept for tests).
    public private(set) var killed = ""
    private var history: History
    /// The line as typed before walking into the history.
    private var draft: [Character]?

    public init(history: History = History()) {
        self.history = history
    }

    /// The current line.
    public var text: String { String(characters) }

    /// The history this buffer walks with Up and Down.
    public var currentHistory: History { history }

    /// Replaces the line and puts the cursor at its end.
    public mutating func set(_ text: String) {
        characters = Array(text)
        cursor = characters.count
    }

    /// Inserts `text` at the cursor.
    public mutating func insert(_ text: String) {
        characters.insert(contentsOf: Array(text), at: cursor)
        cursor += text.count
    }

    /// Applies one key.
    public mutating func apply(_ key: Key) -> Outcome {
        switch key {
        case .character(let character):
            characters.insert(character, at: cursor)
            cursor += 1
        case .enter:
            let line = text
            history.add(line)
            characters = []
            cursor = 0
            draft = nil
            history.resetPosition()
            return .submit(line)
        case .tab: return .complete
        case .backspace:
            if cursor > 0 {
                characters.remove(at: cursor - 1)
                cursor -= 1
            }
        case .delete:
            if cursor < characters.count { characters.remove(at: cursor) }
        case .left: cursor = max(0, cursor - 1)
        case .right: cursor = min(characters.count, cursor + 1)
        case .home: cursor = 0
        case .end: cursor = characters.count
        case .wordLeft: cursor = wordStart(before: cursor)
        case .wordRight: cursor = wordEnd(after: cursor)
        case .up:
            if draft == nil { draft = characters }
            if let entry = history.previous() { set(entry) }
        case .down:
            if let entry = history.next() {
                set(entry)
            } else if let saved = draft {
                characters = saved
                cursor = saved.count
                draft = nil
            }
        case .interrupt:
            characters = []
            cursor = 0
            draft = nil
            history.resetPosition()
            return .cancel
        case .endOfInput:
            if characters.isEmpty { return .endOfInput }
            if cursor < characters.count { characters.remove(at: cursor) }
        case .killToEnd:
            killed = String(characters[cursor...])
            characters.removeSubrange(cursor...)
        case .killToStart:
            killed = String(characters[..<cursor])
            characters.removeSubrange(..<cursor)
            cursor = 0
        case .deleteWordBefore:
            let start = wordStart(before: cursor)
            killed = String(characters[start..<cursor])
            characters.removeSubrange(start..<cursor)
            cursor = start
        case .clearScreen: return .clearScreen
        case .unknown: break
        }
        return .editing
    }

    /// The word the cursor ends (for completion): its start and text.
    public var wordBeforeCursor: (start: Int, text: String) {
        var start = cursor
        while start > 0, !characters[start - 1].isWhitespace { start -= 1 }
        return (start, String(characters[start..<cursor]))
    }

    /// Replaces the word before the cursor with `replacement`.
    public mutating func replaceWordBeforeCursor(with replacement: String) {
        let start = wordBeforeCursor.start
        characters.replaceSubrange(start..<cursor, with: Array(replacement))
        cursor = start + replacement.count
    }

    private func wordStart(before position: Int) -> Int {
        var index = position
        while index > 0, characters[index - 1].isWhitespace { index -= 1 }
        while index > 0, !characters[index - 1].isWhitespace { index -= 1 }
        return index
    }

    private func wordEnd(after position: Int) -> Int {
        var index = position
        while index < characters.count, characters[index].isWhitespace { index += 1 }
        while index < characters.count, !characters[index].isWhitespace { index += 1 }
        return index
    }
}

/// Lines entered before, newest last, walked with Up and Down; no empty lines and no immediate
/// repeats; at most `limit` kept.
///
/// ```swift
/// var history = History(["status", "pull todo"])
/// history.previous()  // "pull todo"
/// history.previous()  // "status"
/// ```
public struct History: Sendable, Equatable {
    public private(set) var entries: [String]
    public let limit: Int
    private var position: Int?

    public init(_ entries: [String] = [], limit: Int = 1_000) {
        self.limit = max(1, limit)
        self.entries = Array(entries.suffix(self.limit))
    }

    /// Records a line.
    public mutating func add(_ line: String) {
        let trimmed = line.trimmingSpaces
        guard !trimmed.isEmpty, entries.last != line else { return }
        entries.append(line)
        if entries.count > limit { entries.removeFirst(entries.count - limit) }
    }

    /// The entry before the current one, or `nil` at the oldest.
    public mutating func previous() -> String? {
        guard !entries.isEmpty else { return nil }
        let next = (position ?? entries.count) - 1
        guard next >= 0 else { return position.map { entries[$0] } }
        position = next
        return entries[next]
    }

    /// The entry after the current one, or `nil` past the newest (back to the draft).
    public mutating func next() -> String? {
        guard let current = position else { return nil }
        if current + 1 < entries.count {
            position = current + 1
            return entries[current + 1]
        }
        position = nil
        return nil
    }

    mutating func resetPosition() { position = nil }
}

extension String {
    var trimmingSpaces: Substring {
        let start = firstIndex { !$0.isWhitespace } ?? endIndex
        let end = lastIndex { !$0.isWhitespace }.map { index(after: $0) } ?? start
        return self[start..<max(start, end)]
    }
}

/// Completion of the word before the cursor from a list of candidates.
public enum Completion: Sendable {
    /// What Tab does: the candidates that extend `word`, and the longest common extension to insert.
    ///
    /// ```swift
    /// Completion.complete("pu", among: ["pull", "purge", "push", "query"])
    /// // (matches: ["pull", "purge", "push"], commonPrefix: "pu")
    /// ```
    public static func complete(_ word: String, among candidates: [String]) -> (matches: [String], commonPrefix: String)
    {
        let matches = Array(Set(candidates.filter { $0.hasPrefix(word) })).sorted()
        guard var prefix = matches.first else { return ([], word) }
        for match in matches.dropFirst() {
            while !match.hasPrefix(prefix) { prefix.removeLast() }
        }
        return (matches, prefix.count >= word.count ? prefix : word)
    }
}
