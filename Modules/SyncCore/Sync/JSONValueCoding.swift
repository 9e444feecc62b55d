// Codable <-> JSONValue without Foundation, for the typed tables.
//
// Integers encode as `.int`, floating-point numbers as `.double`; decoding accepts an integral
// `.double` for an integer type and an `.int` for a floating-point type. `nil` optionals are left
// out when encoded with `encodeIfPresent` (what synthesized conformances do).

/// Encodes a value into a ``JSONValue``.
struct JSONValueEncoder {
    func encode(_ value: some Encodable) throws -> JSONValue {
        if let value = value as? JSONValue { return value }
        if let value = value as? JSONObject { return .object(value) }
        let encoder = ValueEncoder(codingPath: [])
        try value.encode(to: encoder)
        return encoder.storage.value
    }
}

/// Decodes a value from a ``JSONValue``.
struct JSONValueDecoder {
    func decode<Value: Decodable>(_ type: Value.Type, from json: JSONValue) throws -> Value {
        if let value = json as? Value { return value }
        if case .object(let object) = json, let value = object as? Value { return value }
        return try Value(from: ValueDecoder(json, codingPath: []))
    }
}

/// A mutable box so nested containers write into their parent.
private class Box {
    var value: JSONValue
    init(_ value: JSONValue) { self.value = value }
}

private struct AnyKey: CodingKey {
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
    mutating func encode(_ value: Int, forKey key: Key) throws { set(try integer(value, codingPath), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { set(try integer(value, codingPath), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { set(try integer(value, codingPath), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { set(try integer(value, codingPath), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { set(.int(value), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { set(try integer(value, codingPath), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { set(try integer(value, codingPath), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { set(try integer(value, codingPath), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { set(try integer(value, codingPath), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { set(try integer(value, codingPath), key) }
    mutating func encode(_ value: some Encodable, forKey key: Key) throws {
        set(try encodeNested(value, codingPath: codingPath + [key]), key)
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
    mutating func encode(_ value: Int) throws { append(try integer(value, codingPath)) }
    mutating func encode(_ value: Int8) throws { append(try integer(value, codingPath)) }
    mutating func encode(_ value: Int16) throws { append(try integer(value, codingPath)) }
    mutating func encode(_ value: Int32) throws { append(try integer(value, codingPath)) }
    mutating func encode(_ value: Int64) throws { append(.int(value)) }
    mutating func encode(_ value: UInt) throws { append(try integer(value, codingPath)) }
    mutating func encode(_ value: UInt8) throws { append(try integer(value, codingPath)) }
    mutating func encode(_ value: UInt16) throws { append(try integer(value, codingPath)) }
    mutating func encode(_ value: UInt32) throws { append(try integer(value, codingPath)) }
    mutating func encode(_ value: UInt64) throws { append(try integer(value, codingPath)) }
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

// MARK: - Decoding

private struct ValueDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(_ value: JSONValue, codingPath: [any CodingKey]) {
        self.value = value
        self.codingPath = codingPath
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let object) = value else {
            throw DecodingError.typeMismatch(
                JSONObject.self, .init(codingPath: codingPath, debugDescription: "Expected an object, found \(value)."))
        }
        return KeyedDecodingContainer(KeyedDecoder<Key>(object: object, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let array) = value else {
            throw DecodingError.typeMismatch(
                [JSONValue].self, .init(codingPath: codingPath, debugDescription: "Expected an array, found \(value)."))
        }
        return UnkeyedDecoder(array: array, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleDecoder(value: value, codingPath: codingPath)
    }
}

private func mismatch(_ type: Any.Type, _ value: JSONValue, _ codingPath: [any CodingKey]) -> DecodingError {
    DecodingError.typeMismatch(
        type, .init(codingPath: codingPath, debugDescription: "Expected \(type), found \(value)."))
}

private func decodeScalar<T: Decodable>(_ type: T.Type, _ value: JSONValue, _ codingPath: [any CodingKey]) throws
    -> T
{
    switch type {
    case is Bool.Type:
        if case .bool(let bool) = value { return bool as! T }
    case is String.Type:
        if case .string(let string) = value { return string as! T }
    case is Double.Type:
        switch value {
        case .double(let double): return double as! T
        case .int(let int): return Double(int) as! T
        default: break
        }
    case is Float.Type:
        switch value {
        case .double(let double): return Float(double) as! T
        case .int(let int): return Float(int) as! T
        default: break
        }
    default:
        if let result = try decodeInteger(type, value, codingPath) { return result }
        if type == JSONValue.self { return value as! T }
        return try T(from: ValueDecoder(value, codingPath: codingPath))
    }
    throw mismatch(type, value, codingPath)
}

private func decodeInteger<T>(_ type: T.Type, _ value: JSONValue, _ codingPath: [any CodingKey]) throws -> T? {
    guard let integerType = type as? any FixedWidthInteger.Type else { return nil }
    let int64: Int64
    switch value {
    case .int(let int): int64 = int
    case .double(let double):
        guard let exact = Int64(exactly: double) else { throw mismatch(type, value, codingPath) }
        int64 = exact
    default: throw mismatch(type, value, codingPath)
    }
    guard let result = integerType.init(exactly: int64) else {
        throw DecodingError.dataCorrupted(
            .init(codingPath: codingPath, debugDescription: "\(int64) does not fit \(type)."))
    }
    return result as? T
}

private struct KeyedDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let object: JSONObject
    let codingPath: [any CodingKey]

    var allKeys: [Key] { object.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { object[key.stringValue] != nil }

    private func value(_ key: Key) throws -> JSONValue {
        guard let value = object[key.stringValue] else {
            throw DecodingError.keyNotFound(
                key, .init(codingPath: codingPath, debugDescription: "No value for '\(key.stringValue)'."))
        }
        return value
    }

    func decodeNil(forKey key: Key) throws -> Bool { (object[key.stringValue] ?? .null) == .null }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try decodeScalar(type, try value(key), codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try ValueDecoder(try value(key), codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(try value(key), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(object["super"] ?? .null, codingPath: codingPath + [AnyKey(stringValue: "super")])
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(object[key.stringValue] ?? .null, codingPath: codingPath + [key])
    }
}

private struct UnkeyedDecoder: UnkeyedDecodingContainer {
    let array: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(array: [JSONValue], codingPath: [any CodingKey]) {
        self.array = array
        self.codingPath = codingPath
    }

    var count: Int? { array.count }
    var isAtEnd: Bool { currentIndex >= array.count }

    private mutating func next() throws -> (JSONValue, [any CodingKey]) {
        let path = codingPath + [AnyKey(intValue: currentIndex)]
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                JSONValue.self, .init(codingPath: path, debugDescription: "The array has no more elements."))
        }
        defer { currentIndex += 1 }
        return (array[currentIndex], path)
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, array[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (value, path) = try next()
        return try decodeScalar(type, value, path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        let (value, path) = try next()
        return try ValueDecoder(value, codingPath: path).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (value, path) = try next()
        return try ValueDecoder(value, codingPath: path).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let (value, path) = try next()
        return ValueDecoder(value, codingPath: path)
    }
}

private struct SingleDecoder: SingleValueDecodingContainer {
    let value: JSONValue
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool { value == .null }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try decodeScalar(type, value, codingPath)
    }
}
