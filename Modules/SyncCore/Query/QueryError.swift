/// A query that cannot be parsed, validated or evaluated: what is wrong and where.
///
/// Parsing never crashes on bad input: malformed text, an unknown function, wrong argument types,
/// oversized text and deep nesting all end here, with the position of the problem.
///
/// ```swift
/// do {
///     _ = try TableQuery(odata: "$filter=year gt", protocolVersion: .v3)
/// } catch let error as QueryError {
///     print(error)  // "invalid query: $filter at 7: expected an operand after 'gt'"
/// }
/// ```
public struct QueryError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A broad, stable classification of the problem.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The text does not follow the grammar.
        public static let syntax = Code("syntax")
        /// A function name that neither protocol version knows, or one the chosen protocol version lacks.
        public static let unknownFunction = Code("unknownFunction")
        /// A function called with the wrong number of arguments.
        public static let wrongArgumentCount = Code("wrongArgumentCount")
        /// Operands or arguments of types the operation does not accept.
        public static let typeMismatch = Code("typeMismatch")
        /// A field the table's schema does not declare.
        public static let unknownField = Code("unknownField")
        /// A query option with a bad value (`$top=-1`, `$skip=NaN`, `$top` above the maximum).
        public static let invalidOption = Code("invalidOption")
        /// The text is longer than ``QueryLimits/maximumLength``.
        public static let tooLong = Code("tooLong")
        /// Expressions nest deeper than ``QueryLimits/maximumDepth``.
        public static let tooDeep = Code("tooDeep")
        /// An expression that could build strings too long to evaluate safely (nested `replace` or
        /// `concat`: at most 16 times the longest field, and 1 MiB of literals).
        public static let tooLarge = Code("tooLarge")
        /// A feature Ferry recognises but does not evaluate (for example `geo.distance`).
        public static let unsupported = Code("unsupported")

        public var description: String { name }
    }

    public var code: Code
    /// The query option the problem is in (`$filter`, `$orderby`, …), when known.
    public var option: String?
    /// The 0-based character offset of the problem inside that option's value, when known.
    public var position: Int?
    /// What is wrong, in one line.
    public var reason: String

    public init(_ code: Code, _ reason: String, option: String? = nil, position: Int? = nil) {
        self.code = code
        self.reason = reason
        self.option = option
        self.position = position
    }

    public var description: String {
        var location = ""
        if let option { location += option }
        if let position { location += location.isEmpty ? "at \(position)" : " at \(position)" }
        return location.isEmpty ? "invalid query: \(reason)" : "invalid query: \(location): \(reason)"
    }
}

/// Limits that keep hostile or accidental input from exhausting memory or the stack.
public struct QueryLimits: Sendable, Hashable {
    /// The longest query text accepted, in UTF-8 bytes (default 64 KiB).
    public var maximumLength: Int
    /// The deepest expression tree accepted (default 1,000). A chain `a or b or c …` is as deep as it
    /// is long; for long lists of values use `in`.
    public var maximumDepth: Int
    /// The deepest nesting of parentheses, function calls and unary operators (default 100), which
    /// bounds the parser's recursion. A function call counts two levels (it takes more stack), so
    /// at most 50 calls nest in one another: the deepest filter fits a 512 KiB thread.
    public var maximumNesting: Int

    public init(maximumLength: Int = 65_536, maximumDepth: Int = 1_000, maximumNesting: Int? = nil) {
        self.maximumLength = maximumLength
        self.maximumDepth = maximumDepth
        self.maximumNesting = min(maximumNesting ?? 100, maximumDepth)
    }

    public static let `default` = QueryLimits()
}

extension QueryError.Code {
    /// Lets `catch QueryError.Code.syntax { … }` match a ``QueryError`` with that code.
    public static func ~= (pattern: QueryError.Code, error: any Error) -> Bool {
        (error as? QueryError)?.code == pattern
    }
}
