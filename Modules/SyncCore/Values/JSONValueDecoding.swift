// JSONValue -> Decodable, for the typed tables: the decoding half of JSONValueCoding.swift (whose
// header says what is read how).

/// Decodes a value from a ``JSONValue``.
struct JSONValueDecoder {
    func decode<Value: Decodable>(_ type: Value.Type, from json: JSONValue) throws -> Value {
        if let value = json as? Value { return value }
        if case .object(let object) = json, let value = object as? Value { return value }
        return try decodeScalar(type, json, [])
    }
}

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
        case .double(let double):
            // Beyond Float's range it became infinity, which no update could then write back.
            guard Float(double).isFinite else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: codingPath, debugDescription: "\(double) does not fit in a Float."))
            }
            return Float(double) as! T
        case .int(let int): return Float(int) as! T
        default: break
        }
    default:
        if let result = try decodeInteger(type, value, codingPath) { return result }
        if type == JSONValue.self { return value as! T }
        if let wire = try decodeWireValue(type, from: value, at: codingPath) { return wire }
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
