// The Foundation types a typed table writes in the wire's forms, not in their own Codable forms.
//
// Foundation's own forms are wrong for the table protocol: `Date` encodes as seconds since 2001,
// `Data` as an array of bytes, `URL` and `Decimal` as keyed objects. The encoder and decoder of
// JSONValueCoding.swift and JSONValueDecoding.swift ask every value they meet through a generic
// `encode`/`decode` (keyed, unkeyed, single value and top level) whether it is a `WireValue` before
// falling back to its `Codable` conformance. A type that wraps a `Date` (a property wrapper, say) gets
// the wire form when it encodes the date through a container (`container.encode(date)`), but not when
// it hands its encoder to the date (`date.encode(to: encoder)`): then `Date`'s own code writes a
// number, which decodes back (see `Date` below) but is not the wire's form.
#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A type with a JSON form of its own on the wire.
protocol WireValue {
    /// The value's wire form; throws `EncodingError` for a value the wire cannot carry.
    func wireJSON(at codingPath: [any CodingKey]) throws -> JSONValue
    /// Reads the wire form; throws `DecodingError` with `codingPath` for anything else.
    init(wireJSON json: JSONValue, at codingPath: [any CodingKey]) throws
}

/// The wire form of `value` when it has one (see ``WireValue``), else `nil`.
func wireJSON(of value: some Encodable, at codingPath: [any CodingKey]) throws -> JSONValue? {
    guard let value = value as? any WireValue else { return nil }
    return try value.wireJSON(at: codingPath)
}

/// `T` read from its wire form when it has one (see ``WireValue``), else `nil`.
func decodeWireValue<T>(_ type: T.Type, from json: JSONValue, at codingPath: [any CodingKey]) throws -> T? {
    guard let wireType = type as? any WireValue.Type else { return nil }
    return try wireType.init(wireJSON: json, at: codingPath) as? T
}

private func corrupted(_ codingPath: [any CodingKey], _ why: String) -> DecodingError {
    DecodingError.dataCorrupted(DecodingError.Context(codingPath: codingPath, debugDescription: why))
}

private func string<T>(_ json: JSONValue, as type: T.Type, at codingPath: [any CodingKey]) throws -> String {
    guard case .string(let text) = json else {
        throw DecodingError.typeMismatch(
            type, .init(codingPath: codingPath, debugDescription: "Expected a string for \(type), found \(json)."))
    }
    return text
}

/// `Date`: the protocol's date-time, ISO 8601 in UTC with exactly three fraction digits
/// (`2023-11-14T22:13:20.123Z`, the form of `updatedAt`), truncated to the millisecond.
///
/// Decoding reads every form ``Timestamp`` parses: `Z` or an offset (`+01:00`), no fraction or a
/// longer one (truncated to the millisecond). It also reads a JSON number as seconds since
/// 2001-01-01, `Date`'s own `Codable` form, which is what typed tables wrote before they knew
/// dates, so that rows stored then (locally and on servers) still decode and are rewritten as ISO
/// 8601 by their next update. Such a number is accepted only within 10^10 seconds of 2001 (the years
/// 1684 to 2317), so that milliseconds since 1970 (what some JavaScript clients send) fail with an
/// error instead of decoding as a date 50,000 years away.
extension Date: WireValue {
    func wireJSON(at codingPath: [any CodingKey]) throws -> JSONValue {
        let timestamp = Timestamp(self)
        // The years ISO 8601 text carries with four digits, which every parser reads.
        guard Timestamp.wireRange.contains(timestamp.millisecondsSince1970) else {
            // The value given is the seconds, not the date: describing a `Date` of NaN seconds stops
            // the process (FoundationEssentials).
            throw EncodingError.invalidValue(
                timeIntervalSince1970,
                .init(
                    codingPath: codingPath,
                    debugDescription: timeIntervalSince1970.isFinite
                        ? "a date \(timeIntervalSince1970) seconds from 1970 lies outside the years 0000-9999 of the wire."
                        : "a date of \(timeIntervalSince1970) seconds is not a date the wire carries.")
            )
        }
        return .string(timestamp.iso8601)
    }

    init(wireJSON json: JSONValue, at codingPath: [any CodingKey]) throws {
        let legacySeconds: Double
        switch json {
        case .string(let text):
            guard let timestamp = Timestamp(iso8601: text) else {
                throw corrupted(codingPath, "'\(text)' is not an ISO 8601 date-time like 2023-11-14T22:13:20.123Z.")
            }
            self.init(timestamp)
            return
        case .int(let seconds): legacySeconds = Double(seconds)
        case .double(let seconds): legacySeconds = seconds
        default:
            throw DecodingError.typeMismatch(
                Date.self, .init(codingPath: codingPath, debugDescription: "Expected an ISO 8601 date, found \(json)."))
        }
        guard legacySeconds.magnitude <= 10_000_000_000 else {
            throw corrupted(
                codingPath,
                "\(json) is not a date: dates are ISO 8601 strings like 2023-11-14T22:13:20.123Z (a number is read "
                    + "as seconds since 2001, the form of earlier Ferry versions, and this one is out of that range).")
        }
        self.init(Timestamp(Date(timeIntervalSinceReferenceDate: legacySeconds)))
    }
}

/// `UUID`: its text in lowercase (`0193f4a2-7c1e-7a3b-8c2d-5e6f7a8b9c0d`), the form of generated
/// ids (``ItemID/generate()``), of .NET's `Guid` and of JavaScript's `crypto.randomUUID()`.
/// Decoding reads either case.
extension UUID: WireValue {
    func wireJSON(at codingPath: [any CodingKey]) throws -> JSONValue {
        .string(wireText)
    }

    /// The text of the wire form.
    var wireText: String { uuidString.lowercased() }

    init(wireJSON json: JSONValue, at codingPath: [any CodingKey]) throws {
        let text = try string(json, as: UUID.self, at: codingPath)
        guard let uuid = UUID(uuidString: text) else { throw corrupted(codingPath, "'\(text)' is not a UUID.") }
        self = uuid
    }
}

/// `URL`: its absolute string. Decoding refuses text that is not a valid URL as written (no
/// percent-encoding is added).
extension URL: WireValue {
    func wireJSON(at codingPath: [any CodingKey]) throws -> JSONValue {
        .string(absoluteString)
    }

    init(wireJSON json: JSONValue, at codingPath: [any CodingKey]) throws {
        let text = try string(json, as: URL.self, at: codingPath)
        guard let url = URL(string: text, encodingInvalidCharacters: false) else {
            throw corrupted(codingPath, "'\(text)' is not a URL.")
        }
        self = url
    }
}

/// `Data`: base64 with padding (`AAEC/w==`), as .NET writes `byte[]`.
extension Data: WireValue {
    func wireJSON(at codingPath: [any CodingKey]) throws -> JSONValue {
        .string(base64EncodedString())
    }

    init(wireJSON json: JSONValue, at codingPath: [any CodingKey]) throws {
        let text = try string(json, as: Data.self, at: codingPath)
        guard let data = Data(base64Encoded: text) else { throw corrupted(codingPath, "'\(text)' is not base64.") }
        self = data
    }
}

/// `Decimal`: a JSON number, written so that it reads back exactly.
///
/// A number, not a string, because that is what the other clients send for money (.NET `decimal`,
/// JavaScript numbers), and what lets the server type the field as a number and compare it in
/// queries (`price gt 10`). Exactness comes from going through the shortest decimal text of the
/// `Double` both ways (never `Decimal(Double)`, which turns 19.99 into 19.98999999999999488): any
/// value with at most 15 significant digits (every amount of money below 10^13 in cents) reads back
/// exactly, and a whole value that fits `Int64` is written as an integer. A value that a `Double`
/// cannot carry exactly (most of those with 16 or more significant digits; `0.30000000000000004` is
/// a `Double`'s own and passes) is refused with an error rather than rounded, and so is `NaN`. Decoding also reads a string holding a number (`"19.99"`), which some servers send.
extension Decimal: WireValue {
    func wireJSON(at codingPath: [any CodingKey]) throws -> JSONValue {
        let text = description
        if let integer = Int64(text) { return .int(integer) }
        guard isFinite else {
            throw EncodingError.invalidValue(
                self, .init(codingPath: codingPath, debugDescription: "\(text) is not a number JSON carries."))
        }
        guard let double = Double(text), double.isFinite, Decimal(string: double.description) == self else {
            throw EncodingError.invalidValue(
                self,
                .init(
                    codingPath: codingPath,
                    debugDescription:
                        "\(text) has more digits than a JSON number carries exactly (15, or 16 to 17 for some values).")
            )
        }
        return .double(double)
    }

    init(wireJSON json: JSONValue, at codingPath: [any CodingKey]) throws {
        let text: String
        switch json {
        case .int(let integer):
            self.init(integer)
            return
        case .double(let double): text = double.description
        case .string(let string):
            guard Double(string) != nil, string.utf8.allSatisfy({ Self.numberCharacters.contains($0) }) else {
                throw corrupted(codingPath, "'\(string)' is not a decimal number.")
            }
            text = string
        default:
            throw DecodingError.typeMismatch(
                Decimal.self, .init(codingPath: codingPath, debugDescription: "Expected a number, found \(json)."))
        }
        guard let decimal = Decimal(string: text) else {
            throw corrupted(codingPath, "\(text) does not fit a Decimal.")
        }
        self = decimal
    }

    /// The characters of a plain decimal number: `Double(_:)` also reads `nan`, `inf` and hex.
    private static let numberCharacters = Set("0123456789+-.eE".utf8)
}
