/// "Did you mean …?" for a mistyped name: a command, a table, a field.
enum Suggestion {
    /// `did you mean 'push'? `help` lists the commands` when a name is within two edits of `word`,
    /// else a pointer to `help`.
    static func hint(for word: String, among names: [String]) -> String {
        nearest(to: word, among: names).map { "did you mean '\($0)'? `help` lists the commands" }
            ?? "`help` lists the commands"
    }

    /// The name closest to `word` when it is within two edits (and closer than the word is long).
    static func nearest(to word: String, among names: [String]) -> String? {
        // Case does not count, but breaks ties: 'tod' is nearer 'todo' than 'Todo'.
        let scored = names.map {
            (name: $0, distance: distance(word.lowercased(), $0.lowercased()), exact: distance(word, $0))
        }
        guard let best = scored.min(by: { ($0.distance, $0.exact) < ($1.distance, $1.exact) }), best.distance <= 2,
            best.distance < max(word.count, 2)
        else { return nil }
        return best.name
    }

    /// `did you mean 'todo'? the store has todo, notes`: for a name that is not among `names`, the
    /// tables of `owner` ("the store", "the server").
    static func table(_ word: String, among names: [String], of owner: String) -> String {
        let listed =
            names.isEmpty
            ? "\(owner) has no tables yet"
            : names.count <= 12
                ? "\(owner) has \(names.sorted().joined(separator: ", "))" : "\(owner) has \(names.count) tables"
        guard let near = nearest(to: word, among: names) else { return listed }
        return "did you mean '\(near)'? \(listed)"
    }

    /// The Levenshtein distance between two strings.
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        if a.isEmpty { return b.count }
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + Array(repeating: 0, count: b.count)
            for (j, y) in b.enumerated() {
                current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
