/// Percent-encoding (RFC 3986, section 2.1) for the two places Ferry puts text into a URL: a path
/// segment (a table name, an item id) and a query-string name or value (an OData query option).
/// Every byte of the text's UTF-8 that is not kept is written `%XX`, in uppercase hex.
///
/// ```swift
/// PercentEncoding.pathSegment("a b/c")            // "a%20b%2Fc"
/// PercentEncoding.queryComponent("(title eq 'Tom & Jerry')")
/// // "(title%20eq%20'Tom%20%26%20Jerry')"
/// ```
///
/// Both sets are narrower than RFC 3986 allows: encoding a character that could stay is always
/// correct (servers decode it), leaving one that a server or proxy reads as syntax is not.
public enum PercentEncoding: Sendable {
    /// Encodes a path segment: keeps only the unreserved characters `A-Z a-z 0-9 - . _ ~`.
    ///
    /// RFC 3986 (section 3.3) would let a segment keep the sub-delimiters, `:` and `@` too, but
    /// servers give some of them meaning (`;` parameters, `+` as a space), so they are encoded.
    /// The same set suits an element of a comma-separated list inside a query value (the commas
    /// between elements stay; one inside an element is encoded).
    public static func pathSegment(_ text: String) -> String {
        encoded(text) { _ in false }
    }

    /// Encodes a query-string name or value (`name=value&…`): keeps the unreserved characters
    /// and `$ ' ( ) , :`, which OData queries are full of (`$filter=(title eq 'x')`), so that they
    /// stay readable.
    ///
    /// RFC 3986 (section 3.4) allows more in a query, but `&`, `=` and `+` separate names, values
    /// and words in form-style query strings, and `#` would end the query: these and every other
    /// character are encoded. A `'` stays only where the text's quotes pair up: a reader that keeps
    /// a raw `&` inside `'…'` in one value (an OData string literal sent unencoded, as
    /// ``ODataParameters`` reads them) would take the rest of the query string into a value with
    /// an odd one (`tag=%27&$filter=…` lost its filter in a next-page link).
    public static func queryComponent(_ text: String) -> String {
        let keepsQuotes = text.utf8.count(where: { $0 == UInt8(ascii: "'") }).isMultiple(of: 2)
        return encoded(text) { byte in
            switch byte {
            case UInt8(ascii: "$"), UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: ","), UInt8(ascii: ":"):
                true
            case UInt8(ascii: "'"): keepsQuotes
            default: false
            }
        }
    }

    /// `text` with every byte encoded but the unreserved ones and those `keeps` accepts.
    private static func encoded(_ text: String, keeping keeps: (UInt8) -> Bool) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                output.append(byte)
            case _ where keeps(byte):
                output.append(byte)
            default:
                output += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: output, as: UTF8.self)
    }
}
