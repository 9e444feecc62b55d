import SyncCore

/// The constraints a filter implies on ids and `updatedAt` values, for the plan.
extension QueryRunner {
    /// A superset of the ids or `updatedAt` values a filter can select.
    struct Constraint {
        var ids: IDConstraint = .any
        /// Milliseconds an item's `updatedAt` date-time must lie in; `nil`: not constrained.
        var updatedAt: ClosedRange<Int64>?
        /// Whether the `updatedAt` range came from a text literal: an `updatedAt` that is text but
        /// not a date-time compares with it as text, so the range holds only while the table has
        /// no such `updatedAt`.
        var updatedAtFromText = false
        /// An empty `updatedAt` range: nothing matches.
        var updatedAtIsEmpty = false

        func and(_ other: Constraint) -> Constraint {
            var result = Constraint(ids: ids.and(other.ids))
            result.updatedAtIsEmpty = updatedAtIsEmpty || other.updatedAtIsEmpty
            switch (updatedAt, other.updatedAt) {
            case (let a?, let b?):
                let lower = max(a.lowerBound, b.lowerBound)
                let upper = min(a.upperBound, b.upperBound)
                // Both sides hold: where either is exact (date-times only), so is the result.
                result.updatedAtFromText = updatedAtFromText && other.updatedAtFromText
                if lower <= upper {
                    result.updatedAt = lower...upper
                } else if !result.updatedAtFromText {
                    result.updatedAtIsEmpty = true
                } else {
                    result.updatedAt = nil
                    result.updatedAtFromText = false
                }
            case (let a?, nil):
                result.updatedAt = a
                result.updatedAtFromText = updatedAtFromText
            case (nil, let b?):
                result.updatedAt = b
                result.updatedAtFromText = other.updatedAtFromText
            case (nil, nil): break
            }
            if result.updatedAtIsEmpty {
                result.updatedAt = nil
                result.ids = .set([])
            }
            return result
        }

        func or(_ other: Constraint) -> Constraint {
            if isNothing { return other }
            if other.isNothing { return self }
            var result = Constraint(ids: ids.or(other.ids))
            if let a = updatedAt, let b = other.updatedAt {
                result.updatedAt = min(a.lowerBound, b.lowerBound)...max(a.upperBound, b.upperBound)
                result.updatedAtFromText = updatedAtFromText || other.updatedAtFromText
            }
            return result
        }

        /// Whether the constraint admits no item.
        var isNothing: Bool {
            if updatedAtIsEmpty { return true }
            if case .set(let ids) = ids, ids.isEmpty { return true }
            return false
        }
    }

    func constraint(_ expression: QueryExpression) -> Constraint {
        switch expression {
        case .binary(.and, let lhs, let rhs):
            return constraint(lhs).and(constraint(rhs))
        case .binary(.or, let lhs, let rhs):
            return constraint(lhs).or(constraint(rhs))
        case .binary(let op, .field(let field), .literal(let literal)) where op.isComparison:
            return comparison(op, field, literal)
        case .binary(let op, .literal(let literal), .field(let field)) where op.isComparison:
            return comparison(op.mirrored, field, literal)
        case .isIn(.field("id"), let list) where plansID:
            var ids: Set<ItemID.Key> = []
            for element in list {
                guard case .literal(.string(let id)) = element else { return Constraint() }
                ids.insert(ItemID.Key(id))
            }
            return Constraint(ids: .set(ids))
        default:
            return Constraint()
        }
    }

    private func comparison(_ op: BinaryOperator, _ field: String, _ literal: QueryLiteral) -> Constraint {
        if field == "id", plansID, case .string(let id) = literal {
            let bytes = Array(id.utf8)
            switch op {
            case .equal: return Constraint(ids: .set([ItemID.Key(id)]))
            case .greaterThan: return Constraint(ids: .range(IDRange(lower: (bytes, false))))
            case .greaterThanOrEqual: return Constraint(ids: .range(IDRange(lower: (bytes, true))))
            case .lessThan: return Constraint(ids: .range(IDRange(upper: (bytes, false))))
            case .lessThanOrEqual: return Constraint(ids: .range(IDRange(upper: (bytes, true))))
            default: return Constraint()
            }
        }
        if field == "updatedAt", plansUpdatedAt, let instant = Self.milliseconds(literal) {
            var range: ClosedRange<Int64>?
            switch op {
            case .equal: range = instant...instant
            case .greaterThan: range = instant == .max ? nil : (instant + 1)...Int64.max
            case .greaterThanOrEqual: range = instant...Int64.max
            case .lessThan: range = instant == .min ? nil : Int64.min...(instant - 1)
            case .lessThanOrEqual: range = Int64.min...instant
            default: return Constraint()
            }
            var constraint = Constraint()
            if case .string = literal { constraint.updatedAtFromText = true }
            guard let range else {
                // Nothing is above the greatest instant or below the least (as date-times).
                if !constraint.updatedAtFromText { constraint.updatedAtIsEmpty = true }
                return constraint
            }
            constraint.updatedAt = range
            return constraint
        }
        return Constraint()
    }

    /// The instant a literal compares as against a date-time `updatedAt`, as the evaluator reads it.
    static func milliseconds(_ literal: QueryLiteral) -> Int64? {
        switch literal {
        case .dateTimeOffset(let instant): return instant.millisecondsSince1970
        case .date(let date): return date.midnightUTC.millisecondsSince1970
        case .string(let text):
            if let instant = Timestamp(iso8601: text) { return instant.millisecondsSince1970 }
            return CalendarDate(iso8601: text)?.midnightUTC.millisecondsSince1970
        default: return nil
        }
    }
}

extension BinaryOperator {
    /// The operator with its operands swapped: `a < b` is `b > a`.
    var mirrored: BinaryOperator {
        switch self {
        case .greaterThan: .lessThan
        case .greaterThanOrEqual: .lessThanOrEqual
        case .lessThan: .greaterThan
        case .lessThanOrEqual: .greaterThanOrEqual
        default: self
        }
    }
}
