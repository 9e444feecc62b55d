import Foundation
import SyncCore

/// RFC 6902 JSON Patch on JSON values, for `PATCH` with `application/json-patch+json`.
///
/// Paths are JSON Pointers (RFC 6901: `/a/b/0`, `~1` for `/`, `~0` for `~`). As the 3.0 servers
/// do, a path without the leading `/` names a top-level member (`title` is `/title`). A `~` that is
/// not `~0` or `~1`, and an array index that is not `0` or digits without a leading zero (`01`,
/// `+1`; RFC 6901 §4), are refused with the pointer named.
enum JSONPatch {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// `operations` applied in order to `document`. Values copied inside the document may add at
    /// most `maximumCopiedBytes` (serialized) in all: `copy` is the one operation that makes a
    /// document larger than the patch that asked for it, and twenty copies of a member into itself
    /// double it twenty times.
    static func apply(_ operations: [JSONValue], to document: JSONValue, maximumCopiedBytes: Int = .max)
        throws(Failure) -> JSONValue
    {
        var result = document
        var copiedBytes = 0
        for (index, entry) in operations.enumerated() {
            guard case .object(let operation) = entry, case .string(let op)? = operation["op"],
                case .string(let pathText)? = operation["path"]
            else { throw Failure(description: "operation \(index) needs an 'op' and a 'path' string") }
            let path = try pointer(pathText)
            switch op {
            case "add":
                result = try set(result, path, try value(operation, index), inserting: true, pointer: pathText)
            case "replace":
                _ = try get(result, path, pointer: pathText)
                result = try set(result, path, try value(operation, index), inserting: false, pointer: pathText)
            case "remove":
                result = try remove(result, path, pointer: pathText)
            case "test":
                guard try get(result, path, pointer: pathText) == (try value(operation, index)) else {
                    throw Failure(description: "test operation \(index) failed at '\(pathText)'")
                }
            case "move", "copy":
                guard case .string(let fromText)? = operation["from"] else {
                    throw Failure(description: "operation \(index) ('\(op)') needs a 'from' path")
                }
                let from = try pointer(fromText)
                let moved = try get(result, from, pointer: fromText)
                if op == "move" {
                    if path.starts(with: from) && path.count > from.count {
                        throw Failure(description: "operation \(index) moves a value into itself")
                    }
                    result = try remove(result, from, pointer: fromText)
                } else {
                    copiedBytes += moved.serializedUTF8().count
                    guard copiedBytes <= maximumCopiedBytes else {
                        throw Failure(
                            description:
                                "its copies add more than \(maximumCopiedBytes) bytes to the item (the body size limit)"
                        )
                    }
                }
                result = try set(result, path, moved, inserting: true, pointer: pathText)
            default:
                throw Failure(description: "unknown operation '\(op)' (use add, remove, replace, move, copy or test)")
            }
        }
        return result
    }

    /// Why `operations` may not be applied to an item, or `nil`. A patch may not touch system
    /// properties (`id`, `createdAt`, `updatedAt`, `version`, `deleted`, in any letter case) or the
    /// whole document (`""`): no `remove` of them, no `move` or `copy` from or to them. It may `test`
    /// them, and `add` or `replace` them with the value they have (as Azure v5 allows; the caller
    /// checks the values after applying), or `deleted` with a new flag (a soft delete or undelete).
    static func systemPropertyViolation(_ operations: [JSONValue]) -> String? {
        for (index, entry) in operations.enumerated() {
            guard case .object(let operation) = entry, case .string(let op)? = operation["op"], op != "test" else {
                continue
            }
            var touched: [(role: String, text: String)] = []
            if case .string(let path)? = operation["path"] { touched.append(("path", path)) }
            if op == "move" || op == "copy", case .string(let from)? = operation["from"] {
                touched.append(("from", from))
            }
            for (role, text) in touched {
                // An invalid pointer is refused, and named, when the patch is applied.
                guard let tokens = try? pointer(text) else { continue }
                guard let first = tokens.first else {
                    return "operation \(index) ('\(op)') has the whole item as its \(role); patch its fields instead"
                }
                guard SystemProperty.isSystemProperty(first) else { continue }
                let exact = SystemProperty(rawValue: first) != nil
                if (op == "add" || op == "replace") && role == "path" && exact { continue }
                return "operation \(index) ('\(op)') touches '\(first)', a system property the server sets"
            }
        }
        return nil
    }

    private static func value(_ operation: JSONObject, _ index: Int) throws(Failure) -> JSONValue {
        guard let value = operation["value"] else { throw Failure(description: "operation \(index) needs a 'value'") }
        return value
    }

    /// The reference tokens of the pointer `text`, unescaped (`~1` is `/`, `~0` is `~`).
    static func pointer(_ text: String) throws(Failure) -> [String] {
        if text.isEmpty { return [] }
        let body = text.hasPrefix("/") ? text.dropFirst() : Substring(text)
        var tokens: [String] = []
        for token in body.split(separator: "/", omittingEmptySubsequences: false) {
            guard token.contains("~") else {
                tokens.append(String(token))
                continue
            }
            var unescaped = ""
            var characters = token.makeIterator()
            while let character = characters.next() {
                guard character == "~" else {
                    unescaped.append(character)
                    continue
                }
                switch characters.next() {
                case "0": unescaped.append("~")
                case "1": unescaped.append("/")
                default:
                    throw Failure(
                        description: "the pointer '\(text)' has a '~' that is not '~0' or '~1' (RFC 6901 §3)")
                }
            }
            tokens.append(unescaped)
        }
        return tokens
    }

    /// The array index `token` names: `nil` for `-` (past the end) or an index too large to be
    /// one. Anything but `0` or digits without a leading zero is refused (RFC 6901 §4).
    static func arrayIndex(_ token: String, pointer text: String) throws(Failure) -> Int? {
        if token == "-" { return nil }
        let digits = token.utf8
        guard !digits.isEmpty, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            digits.first != UInt8(ascii: "0") || digits.count == 1
        else {
            throw Failure(
                description:
                    "the pointer '\(text)' has '\(token.prefix(40))' where an array index goes (0, or digits without a leading zero; RFC 6901 §4)"
            )
        }
        return Int(token)
    }

    static func get(_ document: JSONValue, _ path: [String], pointer text: String) throws(Failure) -> JSONValue {
        var current = document
        for token in path {
            switch current {
            case .object(let object):
                guard let next = object[token] else { throw Failure(description: "no member '\(token)'") }
                current = next
            case .array(let array):
                guard let index = try arrayIndex(token, pointer: text), array.indices.contains(index) else {
                    throw Failure(description: "no element '\(token)'")
                }
                current = array[index]
            default:
                throw Failure(description: "'\(token)' is not inside an object or array")
            }
        }
        return current
    }

    static func set(
        _ document: JSONValue, _ path: [String], _ value: JSONValue, inserting: Bool, pointer text: String
    ) throws(Failure) -> JSONValue {
        guard let token = path.first else { return value }
        let rest = Array(path.dropFirst())
        switch document {
        case .object(var object):
            if rest.isEmpty {
                object[token] = value
            } else {
                guard let child = object[token] else { throw Failure(description: "no member '\(token)'") }
                object[token] = try set(child, rest, value, inserting: inserting, pointer: text)
            }
            return .object(object)
        case .array(var array):
            let index = try arrayIndex(token, pointer: text)
            if rest.isEmpty {
                if token == "-" && inserting {
                    array.append(value)
                } else if let index, inserting ? index <= array.count : index < array.count {
                    if inserting { array.insert(value, at: index) } else { array[index] = value }
                } else {
                    throw Failure(description: "no element '\(token)'")
                }
            } else {
                guard let index, array.indices.contains(index) else {
                    throw Failure(description: "no element '\(token)'")
                }
                array[index] = try set(array[index], rest, value, inserting: inserting, pointer: text)
            }
            return .array(array)
        default:
            throw Failure(description: "'\(token)' is not inside an object or array")
        }
    }

    static func remove(_ document: JSONValue, _ path: [String], pointer text: String) throws(Failure) -> JSONValue {
        guard let token = path.first else { throw Failure(description: "the whole document cannot be removed") }
        let rest = Array(path.dropFirst())
        switch document {
        case .object(var object):
            guard let child = object[token] else { throw Failure(description: "no member '\(token)'") }
            if rest.isEmpty {
                object.removeValue(forKey: token)
            } else {
                object[token] = try remove(child, rest, pointer: text)
            }
            return .object(object)
        case .array(var array):
            guard let index = try arrayIndex(token, pointer: text), array.indices.contains(index) else {
                throw Failure(description: "no element '\(token)'")
            }
            if rest.isEmpty {
                array.remove(at: index)
            } else {
                array[index] = try remove(array[index], rest, pointer: text)
            }
            return .array(array)
        default:
            throw Failure(description: "'\(token)' is not inside an object or array")
        }
    }
}
