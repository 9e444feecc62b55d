/// The raw parameters of a query string, in order and percent-decoded, with helpers for the next-page link.
///
/// ```swift
/// let parameters = ODataParameters(parsing: "$count=true&$top=125&$filter=(title eq 'A&B')")
/// parameters.value(for: "$FILTER")              // "(title eq 'A&B')"
/// parameters.nextPage(skip: 100, top: 25)       // "$count=true&$filter=(title eq 'A&B')&$skip=100&$top=25"
/// ```
public struct ODataParameters: Sendable, Hashable {
    /// One `name=value` pair.
    public struct Parameter: Sendable, Hashable {
        /// The percent-decoded name.
        public var name: String
        /// The percent-decoded value; empty when the pair had no `=`.
        public var value: String

        /// Creates a pair.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// The pairs, in the order they appeared.
    public var parameters: [Parameter]

    /// The pairs as tuples, in the order they appeared.
    public var items: [(name: String, value: String)] {
        get { parameters.map { ($0.name, $0.value) } }
        set { parameters = newValue.map { Parameter(name: $0.name, value: $0.value) } }
    }

    /// Creates a list from pairs.
    public init(_ items: [(name: String, value: String)] = []) {
        self.parameters = items.map { Parameter(name: $0.name, value: $0.value) }
    }

    /// Splits a query string into its parameters.
    ///
    /// The string is split on `&` characters that are not inside a single-quoted literal of a value (so the raw
    /// `$filter=(title eq 'A&B')` stays one parameter), then each part at its first `=`. Both halves are
    /// percent-decoded, and `+` is a space, as the servers of this protocol family (Node's query parser, ASP.NET)
    /// and every form encoder (`curl --data-urlencode`, Python's `urlencode`, HTML forms) have it: a literal `+`
    /// must be sent as `%2B`, which Ferry's encoder does. A `%` that does not start a valid escape stays as it is,
    /// so raw, unencoded input is otherwise accepted as is. Empty parts are dropped, and one leading
    /// `?` is ignored.
    public init(parsing queryString: String) {
        var bytes = Array(queryString.utf8)
        if bytes.first == UInt8(ascii: "?") { bytes.removeFirst() }
        var parameters: [Parameter] = []
        var start = 0
        var equals: Int?
        var inQuote = false
        func finish(_ end: Int) {
            defer {
                start = end + 1
                equals = nil
                inQuote = false
            }
            guard end > start else { return }
            let nameEnd = equals ?? end
            let valueStart = equals.map { $0 + 1 } ?? end
            parameters.append(
                Parameter(
                    name: ODataParameters.percentDecoded(bytes[start..<nameEnd]),
                    value: ODataParameters.percentDecoded(bytes[valueStart..<end])
                )
            )
        }
        for (offset, byte) in bytes.enumerated() {
            switch byte {
            case UInt8(ascii: "&") where !inQuote: finish(offset)
            case UInt8(ascii: "=") where equals == nil: equals = offset
            case UInt8(ascii: "'") where equals != nil: inQuote.toggle()
            default: break
            }
        }
        finish(bytes.count)
        self.parameters = parameters
    }

    /// The value of the first parameter called `name`, compared without regard to letter case.
    public func value(for name: String) -> String? {
        let key = name.lowercased()
        return parameters.first { $0.name.lowercased() == key }?.value
    }

    /// The 3.0 next-page parameters: these parameters minus `$skip` and `$top`, then `$skip=<skip>` and, when `top`
    /// is not `nil`, `$top=<top>`.
    public func nextPageParameters(skip: Int, top: Int?) -> ODataParameters {
        var next = ODataParameters()
        next.parameters = parameters.filter {
            let key = $0.name.lowercased()
            return key != "$skip" && key != "$top"
        }
        next.parameters.append(Parameter(name: "$skip", value: String(skip)))
        if let top { next.parameters.append(Parameter(name: "$top", value: String(top))) }
        return next
    }

    /// The 3.0 next page as raw (not percent-encoded) `a=b&c=d` text: see ``nextPageParameters(skip:top:)``.
    ///
    /// `"$count=true&$top=125&$filter=x"` with skip 100 and top 25 gives
    /// `"$count=true&$filter=x&$skip=100&$top=25"`.
    public func nextPage(skip: Int, top: Int?) -> String {
        nextPageParameters(skip: skip, top: top).rawQueryString
    }

    /// The parameters joined as raw (not percent-encoded) `name=value` text.
    public var rawQueryString: String {
        parameters.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
    }

    /// The parameters joined as `name=value` text, percent-encoded for a URL's query component (see
    /// ``TableQuery/odataQueryString(protocolVersion:)`` for the characters kept).
    public var percentEncodedQueryString: String {
        parameters.map { PercentEncoding.queryComponent($0.name) + "=" + PercentEncoding.queryComponent($0.value) }
            .joined(separator: "&")
    }

    static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> String {
        guard bytes.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }) else {
            return String(decoding: bytes, as: UTF8.self)
        }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%"), index + 2 < bytes.endIndex,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
            {
                output.append(high << 4 | low)
                index += 3
            } else if byte == UInt8(ascii: "+") {
                output.append(UInt8(ascii: " "))
                index += 1
            } else {
                output.append(byte)
                index += 1
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
