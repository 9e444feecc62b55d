// Codable <-> JSONValue, for the typed tables (decoding is in JSONValueDecoding.swift).
//
// Integers encode as `.int`, floating-point numbers as `.double`; decoding accepts an integral
// `.double` for an integer type and an `.int` for a floating-point type. Foundation's `Date`,
// `UUID`, `URL`, `Data` and `Decimal` take their wire forms (WireValues.swift) wherever they appear.
// A `nil` optional is written as `null`, also through `encodeIfPresent` (what synthesized
// conformances call): the other clients write nulls out, and a 2.0 `PATCH` leaves a field it does
// not mention unchanged, so leaving the field out would never clear it on the server. Decoding reads
// a missing field and a `null` alike as `nil`.

/// Encodes a value into a ``JSONValue``.
struct JSONValueEncoder {
    func encode(_ value: some Encodable) throws -> JSONValue {
        if let value = value as? JSONValue { return value }
        if let value = value as? JSONObject { return .object(value) }
        return try encodeNested(value, codingPath: [])
    }
}

/// A mutable box so nested containers write into their parent.
private class Box {
    var value: JSONValue
    init(_ value: JSONValue) { self.value = value }
}

struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(stringValue: String) { self.stringValue = stringValue }
    init(intValue: Int) {
        self.stringValue = String(intValue)
        self.intValue = intValue
    }
}

// MARK: - Encoding

private final class ValueEncoder: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    let storage = Box(.null)

    init(codingPath: [any CodingKey]) { self.codingPath = codingPath }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = storage.value {} else { storage.value = .object([:]) }
        return KeyedEncodingContainer(KeyedEncoder<Key>(box: storage, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = storage.value {} else { storage.value = .array([]) }
        return UnkeyedEncoder(box: storage, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleEncoder(box: storage, codingPath: codingPath)
    }
}

private func encodeNested(_ value: some Encodable, codingPath: [any CodingKey]) throws -> JSONValue {
    if let value = value as? JSONValue { return value }
    if let wire = try wireJSON(of: value, at: codingPath) { return wire }
    let encoder = ValueEncoder(codingPath: codingPath)
    try value.encode(to: encoder)
    return encoder.storage.value
}

private func checkedDouble(_ value: Double, _ codingPath: [any CodingKey]) throws -> JSONValue {
    guard value.isFinite else {
        throw EncodingError.invalidValue(
            value, EncodingError.Context(codingPath: codingPath, debugDescription: "JSON has no NaN or infinity."))
    }
    return .double(value)
}

private func integer<T: BinaryInteger>(_ value: T, _ codingPath: [any CodingKey]) throws -> JSONValue {
    guard let exact = Int64(exactly: value) else {
        throw EncodingError.invalidValue(
            value, EncodingError.Context(codingPath: codingPath, debugDescription: "\(value) does not fit Int64."))
    }
    return .int(exact)
}

private struct KeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let box: Box
    let codingPath: [any CodingKey]

    private func set(_ value: JSONValue, _ key: Key) {
        guard case .object(var object) = box.value else { return }
        box.value = .null
        object[key.stringValue] = value
        box.value = .object(object)
    }

    mutating func encodeNil(forKey key: Key) throws { set(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { set(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { set(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        set(try checkedDouble(value, codingPath + [key]), key)
    }
    mutating func encode(_ value: Float, forKey key: Key) throws {
        set(try checkedDouble(Double(value), codingPath + [key]), key)
    }
    mutating func encode(_ value: Int, forKey key: Key) throws { set(try integer(value, codingPath + [key]), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { set(try integer(value, codingPath + [key]), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { set(try integer(value, codingPath + [key]), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { set(try integer(value, codingPath + [key]), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { set(.int(value), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { set(try integer(value, codingPath + [key]), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { set(try integer(value, codingPath + [key]), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { set(try integer(value, codingPath + [key]), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { set(try integer(value, codingPath + [key]), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { set(try integer(value, codingPath + [key]), key) }
    mutating func encode(_ value: some Encodable, forKey key: Key) throws {
        set(try encodeNested(value, codingPath: codingPath + [key]), key)
    }

    // `nil` as `null` (see the top of the file).
    private mutating func encodeOrNull(_ value: (some Encodable)?, _ key: Key) throws {
        if let value { try encode(value, forKey: key) } else { set(.null, key) }
    }
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: Float?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: Int8?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: Int16?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: UInt?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: UInt8?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { try encodeOrNull(value, key) }
    mutating func encodeIfPresent(_ value: (some Encodable)?, forKey key: Key) throws {
        try encodeOrNull(value, key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
        -> KeyedEncodingContainer<NestedKey>
    {
        let nested = ChildBox(parent: box, key: key.stringValue, initial: .object([:]))
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(box: nested, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = ChildBox(parent: box, key: key.stringValue, initial: .array([]))
        return UnkeyedEncoder(box: nested, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder { superEncoder(forKey: Key(stringValue: "super")!) }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        let encoder = ChildEncoder(parent: box, key: key.stringValue, codingPath: codingPath + [key])
        return encoder
    }
}

/// A box whose value is written back into a parent object or array on every change.
private final class ChildBox: Box {
    let parent: Box
    let key: String?

    init(parent: Box, key: String?, initial: JSONValue) {
        self.parent = parent
        self.key = key
        super.init(initial)
        writeBack()
    }

    override var value: JSONValue {
        didSet { writeBack() }
    }

    private var index: Int?

    private func writeBack() {
        switch parent.value {
        case .object(var object):
            guard let key else { return }
            parent.value = .null
            object[key] = value
            parent.value = .object(object)
        case .array(var array):
            parent.value = .null
            if let index {
                array[index] = value
            } else {
                index = array.count
                array.append(value)
            }
            parent.value = .array(array)
        default: break
        }
    }
}

/// An encoder for `superEncoder(forKey:)`: its value lands in the parent under `key`.
private final class ChildEncoder: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    let box: ChildBox

    init(parent: Box, key: String?, codingPath: [any CodingKey]) {
        self.codingPath = codingPath
        self.box = ChildBox(parent: parent, key: key, initial: .null)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = box.value {} else { box.value = .object([:]) }
        return KeyedEncodingContainer(KeyedEncoder<Key>(box: box, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = box.value {} else { box.value = .array([]) }
        return UnkeyedEncoder(box: box, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleEncoder(box: box, codingPath: codingPath)
    }
}

private struct UnkeyedEncoder: UnkeyedEncodingContainer {
    let box: Box
    let codingPath: [any CodingKey]

    var count: Int {
        if case .array(let array) = box.value { return array.count }
        return 0
    }

    private func append(_ value: JSONValue) {
        guard case .array(var array) = box.value else { return }
        box.value = .null
        array.append(value)
        box.value = .array(array)
    }

    private var key: any CodingKey { AnyKey(intValue: count) }

    mutating func encodeNil() throws { append(.null) }
    mutating func encode(_ value: Bool) throws { append(.bool(value)) }
    mutating func encode(_ value: String) throws { append(.string(value)) }
    mutating func encode(_ value: Double) throws { append(try checkedDouble(value, codingPath + [key])) }
    mutating func encode(_ value: Float) throws { append(try checkedDouble(Double(value), codingPath + [key])) }
    mutating func encode(_ value: Int) throws { append(try integer(value, codingPath + [key])) }
    mutating func encode(_ value: Int8) throws { append(try integer(value, codingPath + [key])) }
    mutating func encode(_ value: Int16) throws { append(try integer(value, codingPath + [key])) }
    mutating func encode(_ value: Int32) throws { append(try integer(value, codingPath + [key])) }
    mutating func encode(_ value: Int64) throws { append(.int(value)) }
    mutating func encode(_ value: UInt) throws { append(try integer(value, codingPath + [key])) }
    mutating func encode(_ value: UInt8) throws { append(try integer(value, codingPath + [key])) }
    mutating func encode(_ value: UInt16) throws { append(try integer(value, codingPath + [key])) }
    mutating func encode(_ value: UInt32) throws { append(try integer(value, codingPath + [key])) }
    mutating func encode(_ value: UInt64) throws { append(try integer(value, codingPath + [key])) }
    mutating func encode(_ value: some Encodable) throws {
        append(try encodeNested(value, codingPath: codingPath + [key]))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
        -> KeyedEncodingContainer<NestedKey>
    {
        let path = codingPath + [key]
        let nested = ChildBox(parent: box, key: nil, initial: .object([:]))
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(box: nested, codingPath: path))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let path = codingPath + [key]
        let nested = ChildBox(parent: box, key: nil, initial: .array([]))
        return UnkeyedEncoder(box: nested, codingPath: path)
    }

    mutating func superEncoder() -> any Encoder {
        ChildEncoder(parent: box, key: nil, codingPath: codingPath + [key])
    }
}

private struct SingleEncoder: SingleValueEncodingContainer {
    let box: Box
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { box.value = .null }
    mutating func encode(_ value: Bool) throws { box.value = .bool(value) }
    mutating func encode(_ value: String) throws { box.value = .string(value) }
    mutating func encode(_ value: Double) throws { box.value = try checkedDouble(value, codingPath) }
    mutating func encode(_ value: Float) throws { box.value = try checkedDouble(Double(value), codingPath) }
    mutating func encode(_ value: Int) throws { box.value = try integer(value, codingPath) }
    mutating func encode(_ value: Int8) throws { box.value = try integer(value, codingPath) }
    mutating func encode(_ value: Int16) throws { box.value = try integer(value, codingPath) }
    mutating func encode(_ value: Int32) throws { box.value = try integer(value, codingPath) }
    mutating func encode(_ value: Int64) throws { box.value = .int(value) }
    mutating func encode(_ value: UInt) throws { box.value = try integer(value, codingPath) }
    mutating func encode(_ value: UInt8) throws { box.value = try integer(value, codingPath) }
    mutating func encode(_ value: UInt16) throws { box.value = try integer(value, codingPath) }
    mutating func encode(_ value: UInt32) throws { box.value = try integer(value, codingPath) }
    mutating func encode(_ value: UInt64) throws { box.value = try integer(value, codingPath) }
    mutating func encode(_ value: some Encodable) throws {
        box.value = try encodeNested(value, codingPath: codingPath)
    }
}
