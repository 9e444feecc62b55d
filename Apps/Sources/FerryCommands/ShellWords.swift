import FerryClient

enum ShellWords {
    /// Splits a line into words as sh does: single and double quotes, backslash escapes, and a `#`
    /// at the start of a word begins a comment that runs to the end of the line. A word that starts
    /// with `{` or `[` is raw JSON up to its matching bracket, so `insert todo {"title":"x y"}` needs
    /// no shell quoting.
    static func split(_ line: String) throws(ClientError) -> [String] {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Character?
        var escaped = false
        var json = JSONScan()
        for character in line {
            if json.depth > 0 {
                word.append(character)
                json.consume(character)
                if json.depth == 0 {
                    words.append(word)
                    word = ""
                    inWord = false
                }
            } else if escaped {
                word.append(character)
                escaped = false
            } else if let open = quote {
                if character == open {
                    quote = nil
                } else if character == "\\" && open == "\"" {
                    escaped = true
                } else {
                    word.append(character)
                }
            } else if (character == "{" || character == "[") && !inWord {
                word = String(character)
                inWord = true
                json = JSONScan()
                json.consume(character)
            } else if character == "#" && !inWord {
                break  // a comment to the end of the line, as in sh (`push   # send the queue`)
            } else if character == "'" || character == "\"" {
                quote = character
                inWord = true
            } else if character == "\\" {
                escaped = true
                inWord = true
            } else if character.isWhitespace {
                if inWord { words.append(word) }
                word = ""
                inWord = false
            } else {
                word.append(character)
                inWord = true
            }
        }
        if quote != nil { throw ClientError(.usage, "a quote is not closed") }
        if json.depth > 0 { throw ClientError(.usage, "the JSON is not closed (a '}' or ']' is missing)") }
        if inWord { words.append(word) }
        return words
    }

    /// Follows the nesting of raw JSON text, skipping brackets inside strings.
    struct JSONScan {
        var depth = 0
        var inString = false
        var escaped = false

        mutating func consume(_ character: Character) {
            if inString {
                if escaped {
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    inString = false
                }
                return
            }
            switch character {
            case "\"": inString = true
            case "{", "[": depth += 1
            case "}", "]": depth -= 1
            default: break
            }
        }
    }
}
