// The one rule for field names, shared by the OData parser (`$filter`, `$orderby`) and by queries built in code:
// a field is a top-level member of the item, named by an identifier. A path into a nested value (`details/priority`)
// and a qualified name (`Namespace.Type`) are recognised and refused with the same words everywhere.

extension ODataSyntax {
    /// Why a qualified name such as `Edm.String` cannot name a field.
    static func qualifiedNameReason(_ name: String) -> String {
        "qualified names such as '\(name)' are not supported"
    }

    /// Why a path such as `details/priority` cannot name a field; `first` is the part before the first `/`.
    static func pathReason(_ first: String) -> String {
        "paths such as '\(first)/…' are not supported"
    }

    /// What is wrong with `name` as a field name (its code, its reason and the character offset of the problem),
    /// or `nil` when it is an identifier.
    static func fieldNameProblem(_ name: String) -> (code: QueryError.Code, reason: String, offset: Int)? {
        let bytes = Array(name.utf8)
        let slash = bytes.firstIndex(of: UInt8(ascii: "/"))
        let first = bytes[..<(slash ?? bytes.count)]
        if first.isEmpty {
            return (.syntax, "expected a field name", 0)
        }
        if first.contains(UInt8(ascii: ".")), first.first.map(isIdentifierStart) == true {
            return (.unsupported, qualifiedNameReason(String(decoding: first, as: UTF8.self)), 0)
        }
        if let bad = first.indices.first(where: { offset in
            offset == 0 ? !isIdentifierStart(bytes[offset]) : !isIdentifierPart(bytes[offset])
        }) {
            let reason = "'\(character(in: bytes, at: bad))' cannot appear in a field name"
            return (.syntax, reason, characterOffset(in: bytes, byteOffset: bad))
        }
        if let slash {
            return (
                .unsupported, pathReason(String(decoding: first, as: UTF8.self)),
                characterOffset(in: bytes, byteOffset: slash)
            )
        }
        return nil
    }
}

extension TableQuery {
    /// Checks every field name the query names (`$filter`, `$orderby`, `$select`) by the rule the OData parser
    /// applies, so that a query built in code fails where the same query as text would.
    func validateFieldNames() throws(QueryError) {
        for field in select ?? [] { try Self.validateFieldName(field, option: "$select") }
        var stack = (filter.map { [($0, "$filter")] } ?? []) + orderBy.map { ($0.expression, "$orderby") }
        while let (next, option) = stack.popLast() {
            switch next {
            case .literal: break
            case .field(let name): try Self.validateFieldName(name, option: option)
            case .unary(_, let operand): stack.append((operand, option))
            case .binary(_, let lhs, let rhs): stack.append(contentsOf: [(lhs, option), (rhs, option)])
            case .function(_, let arguments): stack.append(contentsOf: arguments.map { ($0, option) })
            case .isIn(let value, let list): stack.append(contentsOf: ([value] + list).map { ($0, option) })
            case .cast(let value, _): stack.append((value, option))
            }
        }
    }

    private static func validateFieldName(_ name: String, option: String) throws(QueryError) {
        if let problem = ODataSyntax.fieldNameProblem(name) {
            throw QueryError(problem.code, problem.reason, option: option)
        }
    }

    /// Checks what every server and store reads the same way, whatever its schema (field names as the OData
    /// parser reads them, nesting depth), so that a bad query fails at the call with
    /// ``SyncError/Code/invalidQuery`` rather than match nothing. Stores themselves accept any field name.
    func validateShape(_ action: String) throws(SyncError) {
        do throws(QueryError) {
            try validateFieldNames()
            try QueryEvaluator().validate(self)
        } catch {
            throw SyncError(.invalidQuery, "\(action): \(error)", underlying: error)
        }
    }
}
