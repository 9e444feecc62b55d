// The recording decoder of the field probe (see FieldProbe.swift): it hands every stored value an unmarked
// sample (false, 0, "", the nil UUID, 1970-01-01T00:00:00.000Z, the first case of a CaseIterable enum) and
// the marked value a different one (true, 1, "m", …).

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Which values a probe decoding marks.
enum ProbeMode: Sendable {
    /// Nothing is marked; every stored value met is recorded.
    case discover(ProbeRecorder)
    /// The value at this path is marked.
    case probe([String])
    /// Everything is marked (the elements of a marked array).
    case all

    func isMarked(_ path: [String]) -> Bool {
        switch self {
        case .discover: false
        case .probe(let marked): marked == path
        case .all: true
        }
    }

    func record(_ path: [String], _ type: Any.Type?) {
        if case .discover(let recorder) = self { recorder.record(path, type) }
    }
}

/// Nested optionals and recursive models are followed this deep; deeper values are `nil`.
private let maximumProbeDepth = 8

struct ProbeDecoder: Decoder {
    let path: [String]
    let mode: ProbeMode
    var codingPath: [any CodingKey] { path.map { AnyKey(stringValue: $0) } }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(ProbeKeyedContainer<Key>(path: path, mode: mode))
    }

    func unkeyedContainer() -> any UnkeyedDecodingContainer {
        mode.record(path, nil)
        return ProbeUnkeyedContainer(path: path, mode: mode.isMarked(path) ? .all : mode)
    }

    func singleValueContainer() -> any SingleValueDecodingContainer { self }
}

extension ProbeDecoder: SingleValueDecodingContainer {
    func decodeNil() -> Bool { path.count > maximumProbeDepth }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let marked = mode.isMarked(path)
        if let value = Self.primitive(type, marked: marked) {
            mode.record(path, type)
            return value
        }
        if let json = Self.wireSample(type, marked: marked), let value = try decodeWireValue(type, from: json, at: []) {
            mode.record(path, type)
            return value
        }
        if let cases = T.self as? any CaseIterable.Type, let value = Self.someCase(cases, marked: marked) as? T {
            mode.record(path, type)
            return value
        }
        return try T(from: self)
    }

    /// The type's full name when it is one the probe hands plain values (`Bool`, `String`, the
    /// integers and floats, `Timestamp`), looking through `Optional`; otherwise `nil`.
    static func primitiveName(_ type: Any.Type) -> String? {
        let unwrapped = (type as? any ProbeOptional.Type)?.probeWrapped ?? type
        return primitive(unwrapped, marked: false) == nil ? nil : String(reflecting: unwrapped)
    }

    /// Whether `type` (or the full name of one) is `Date` or ``Timestamp``, looking through `Optional`:
    /// what the model encoder stores as ISO 8601 text.
    static func isDate(_ type: Any.Type) -> Bool {
        isDate(String(reflecting: (type as? any ProbeOptional.Type)?.probeWrapped ?? type))
    }

    static func isDate(_ name: String) -> Bool {
        name == String(reflecting: Date.self) || name == String(reflecting: Timestamp.self)
    }

    private static func primitive<T>(_ type: T.Type, marked: Bool) -> T? {
        let number = marked ? 1 : 0
        switch type {
        case is Bool.Type: return marked as? T
        case is String.Type: return (marked ? "m" : "") as? T
        case is Int.Type: return number as? T
        case is Int8.Type: return Int8(number) as? T
        case is Int16.Type: return Int16(number) as? T
        case is Int32.Type: return Int32(number) as? T
        case is Int64.Type: return Int64(number) as? T
        case is UInt.Type: return UInt(number) as? T
        case is UInt8.Type: return UInt8(number) as? T
        case is UInt16.Type: return UInt16(number) as? T
        case is UInt32.Type: return UInt32(number) as? T
        case is UInt64.Type: return UInt64(number) as? T
        case is Double.Type: return Double(number) as? T
        case is Float.Type: return Float(number) as? T
        case is Timestamp.Type: return Timestamp(millisecondsSince1970: Int64(number)) as? T
        default: return nil
        }
    }

    private static func wireSample<T>(_ type: T.Type, marked: Bool) -> JSONValue? {
        switch type {
        case is Date.Type: .string(marked ? "1970-01-01T00:00:00.001Z" : "1970-01-01T00:00:00.000Z")
        case is UUID.Type:
            .string(marked ? "00000000-0000-0000-0000-000000000001" : "00000000-0000-0000-0000-000000000000")
        case is URL.Type: .string(marked ? "https://marked.invalid/" : "https://unmarked.invalid/")
        case is Data.Type: .string(marked ? "AQ==" : "")
        case is Decimal.Type: .int(marked ? 1 : 0)
        default: nil
        }
    }

    private static func someCase<C: CaseIterable>(_ type: C.Type, marked: Bool) -> Any? {
        let cases = Array(type.allCases)
        guard let first = cases.first else { return nil }
        return marked && cases.count > 1 ? cases[1] : first
    }
}

struct ProbeKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let path: [String]
    let mode: ProbeMode
    var codingPath: [any CodingKey] { path.map { AnyKey(stringValue: $0) } }
    /// Dictionaries have no keys: their fields cannot be probed.
    var allKeys: [Key] { [] }

    private func decoder(_ key: Key) -> ProbeDecoder { ProbeDecoder(path: path + [key.stringValue], mode: mode) }

    func contains(_ key: Key) -> Bool { path.count < maximumProbeDepth }
    func decodeNil(forKey key: Key) throws -> Bool { decoder(key).decodeNil() }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try decoder(key).decode(type) }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        decoder(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        decoder(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { ProbeDecoder(path: path + ["super"], mode: mode) }
    func superDecoder(forKey key: Key) throws -> any Decoder { decoder(key) }
}

/// An array: empty, or one marked element when the array is the marked value.
struct ProbeUnkeyedContainer: UnkeyedDecodingContainer {
    let path: [String]
    let mode: ProbeMode
    var codingPath: [any CodingKey] { path.map { AnyKey(stringValue: $0) } }
    var currentIndex = 0
    var count: Int? { if case .all = mode { 1 } else { 0 } }
    var isAtEnd: Bool { currentIndex >= (count ?? 0) }

    init(path: [String], mode: ProbeMode) {
        self.path = path
        self.mode = mode
    }

    private var element: ProbeDecoder { ProbeDecoder(path: path, mode: mode) }

    mutating func decodeNil() throws -> Bool { false }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "The array ended."))
        }
        currentIndex += 1
        return try element.decode(type)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type
    ) throws -> KeyedDecodingContainer<NestedKey> {
        currentIndex += 1
        return element.container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        currentIndex += 1
        return element.unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        currentIndex += 1
        return element
    }
}

/// `Optional`, to look through it (``ProbeDecoder/primitiveName(_:)``).
protocol ProbeOptional {
    static var probeWrapped: Any.Type { get }
}

extension Optional: ProbeOptional {
    static var probeWrapped: Any.Type { Wrapped.self }
}
