import SyncCore

/// A range of ids, by UTF-8 bytes.
struct IDRange: Sendable, Equatable {
    /// One end of a range: its bytes, and whether the range holds them.
    typealias Bound = (bytes: [UInt8], inclusive: Bool)

    var lower: Bound?
    var upper: Bound?

    init(lower: Bound? = nil, upper: Bound? = nil) {
        self.lower = lower
        self.upper = upper
    }

    static func == (lhs: IDRange, rhs: IDRange) -> Bool {
        lhs.lower?.bytes == rhs.lower?.bytes && lhs.lower?.inclusive == rhs.lower?.inclusive
            && lhs.upper?.bytes == rhs.upper?.bytes && lhs.upper?.inclusive == rhs.upper?.inclusive
    }

    func contains(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        if let lower {
            if bytes.lexicographicallyPrecedes(lower.bytes) { return false }
            if !lower.inclusive, bytes == lower.bytes { return false }
        }
        if let upper {
            if upper.bytes.lexicographicallyPrecedes(bytes) { return false }
            if !upper.inclusive, bytes == upper.bytes { return false }
        }
        return true
    }

    /// The tighter of two lower bounds (`isLower`) or of two upper bounds; a missing one leaves
    /// the other.
    static func tighter(_ a: Bound?, _ b: Bound?, isLower: Bool) -> Bound? {
        guard let a, let b else { return a ?? b }
        return pick(a, b, greater: isLower, inclusive: a.inclusive && b.inclusive)
    }

    /// The looser of two lower bounds (`isLower`) or of two upper bounds; none when either side
    /// has none.
    static func looser(_ a: Bound?, _ b: Bound?, isLower: Bool) -> Bound? {
        guard let a, let b else { return nil }
        return pick(a, b, greater: !isLower, inclusive: a.inclusive || b.inclusive)
    }

    /// The greater (or the lesser) of two bounds by bytes; for equal bytes, `inclusive` says
    /// whether the result admits them.
    private static func pick(_ a: Bound, _ b: Bound, greater: Bool, inclusive: Bool) -> Bound {
        if a.bytes == b.bytes { return (a.bytes, inclusive) }
        return a.bytes.lexicographicallyPrecedes(b.bytes) == greater ? b : a
    }
}

/// What a filter says about ids.
enum IDConstraint: Equatable {
    case any
    /// These ids, told apart by their bytes ("café" in two Unicode forms is two ids).
    case set(Set<ItemID.Key>)
    case range(IDRange)

    func and(_ other: IDConstraint) -> IDConstraint {
        switch (self, other) {
        case (.any, _): return other
        case (_, .any): return self
        case (.set(let a), .set(let b)): return .set(a.intersection(b))
        case (.set(let ids), .range(let range)), (.range(let range), .set(let ids)):
            return .set(ids.filter { range.contains($0.id) })
        case (.range(let a), .range(let b)):
            return .range(
                IDRange(
                    lower: IDRange.tighter(a.lower, b.lower, isLower: true),
                    upper: IDRange.tighter(a.upper, b.upper, isLower: false)))
        }
    }

    func or(_ other: IDConstraint) -> IDConstraint {
        switch (self, other) {
        case (.any, _), (_, .any): return .any
        case (.set(let a), .set(let b)): return .set(a.union(b))
        case (.set(let ids), .range(let range)), (.range(let range), .set(let ids)):
            if ids.isEmpty { return .range(range) }
            let sorted = ids.map { Array($0.id.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
            return .range(range).or(.range(IDRange(lower: (sorted.first!, true), upper: (sorted.last!, true))))
        case (.range(let a), .range(let b)):
            // The hull: the looser bound on each side (none when either side has none).
            return .range(
                IDRange(
                    lower: IDRange.looser(a.lower, b.lower, isLower: true),
                    upper: IDRange.looser(a.upper, b.upper, isLower: false)))
        }
    }
}
