// Key paths to field names without macros: the model is decoded by a recording decoder, once with every stored
// value "unmarked" and once per stored value with that value "marked". A key path names the field whose marked
// instance differs from the unmarked one at that key path. The probes are made once per model type.

import Synchronization

/// The probed instances of one model type.
struct FieldProbe<Model: Decodable & Sendable>: Sendable {
    /// The instance with every stored value unmarked.
    let base: Model
    /// For each stored value, the instance with that value marked.
    let marked: [(leaf: ProbeLeaf, instance: Model)]

    /// Probes `Model`, or says why it cannot be probed.
    init() throws(SyncError) {
        let model = String(describing: Model.self)
        let recorder = ProbeRecorder()
        do {
            base = try Model(from: ProbeDecoder(path: [], mode: .discover(recorder)))
        } catch {
            throw Self.unprobeable(model, error)
        }
        var marked: [(leaf: ProbeLeaf, instance: Model)] = []
        for leaf in recorder.leaves.withLock({ $0 }) {
            do {
                let instance = try Model(from: ProbeDecoder(path: [], mode: .probe(leaf.path)))
                marked.append((leaf, instance))
            } catch {
                throw Self.unprobeable(model, error)
            }
        }
        self.marked = marked
    }

    /// Why `model` cannot be probed, naming the field and the fix: an enum that is not
    /// `CaseIterable` (the probe has no value of it to give), or an `init(from:)` that refused a
    /// sample value.
    static func unprobeable(_ model: String, _ error: any Error) -> SyncError {
        let prefix = "\(model) cannot be used in a typed query: "
        let instead = "; or query it with TableQuery and field names"
        var field: String?
        var reason = "\(error)"
        if let error = error as? DecodingError {
            let context: DecodingError.Context? =
                switch error {
                case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context),
                    .dataCorrupted(let context):
                    context
                @unknown default: nil
                }
            if let context {
                let path = context.codingPath.map(\.stringValue).filter { !$0.isEmpty }
                field = path.isEmpty ? nil : path.joined(separator: ".")
                reason = String(context.debugDescription.reversed().drop(while: { $0 == " " }).reversed())
            }
        }
        let named = field.map { "the field '\($0)'" } ?? "a field"
        let message: String
        // Swift's own words for a raw value that no case has: the probe gave a value no case
        // has, because it could not list the cases.
        let swiftsWords = "Cannot initialize "
        if reason.hasPrefix(swiftsWords), let from = reason.firstRange(of: " from invalid ") {
            let type = reason[reason.index(reason.startIndex, offsetBy: swiftsWords.count)..<from.lowerBound]
            message =
                prefix + "\(named) is an enum that is not CaseIterable: declare `enum \(type): CaseIterable` "
                + "so that the fields can be told apart" + instead
        } else {
            message =
                prefix + "its init(from:) refused a sample value of \(named) (\(reason)): it must accept any value "
                + "of the field's type (an enum field must be CaseIterable)" + instead
        }
        return SyncError(.invalidQuery, message, underlying: SendableDescription(String(describing: error)))
    }

    /// The field a key path reads, or why it names none.
    func field<Value: Equatable>(of keyPath: KeyPath<Model, Value>) throws(SyncError) -> String {
        let model = String(describing: Model.self)
        let unmarked = base[keyPath: keyPath]
        let differing = marked.filter { $0.instance[keyPath: keyPath] != unmarked }.map(\.leaf)
        let fields = Set(differing.compactMap(\.path.first))
        guard fields.count == 1, let field = fields.first else {
            let why =
                fields.isEmpty
                ? "it is not a stored property (a computed property, or one that Codable does not encode)"
                : "it reads several stored fields (\(fields.sorted().joined(separator: ", ")))"
            throw SyncError(.invalidQuery, "a key path of \(model) cannot be queried: \(why)")
        }
        // A key path into a nested value changes some of the field's stored values, or the only one with its type.
        let under = marked.filter { $0.leaf.path.first == field }.count
        let valueType = String(reflecting: Value.self)
        let single = differing.count == 1 ? differing.first : nil
        let intoNested =
            differing.count < under
            || (single.map { $0.path.count > 1 && ($0.type == valueType || "Swift.Optional<\($0.type)>" == valueType) }
                ?? false)
        if intoNested, let leaf = differing.first {
            let path = leaf.path.joined(separator: "/")
            throw SyncError(
                .invalidQuery,
                "the key path to '\(path)' of \(model) reads into a nested value: \(ODataSyntax.pathReason(field)); "
                    + "query the top-level field '\(field)' or store the value as a field of its own")
        }
        // A plain value (a number, a string, a Bool) read from a field that holds another kind of
        // value is computed from it: `var count: Int { fruits.count }` of an array (its probe
        // values, 0 and 1, matched the Int samples' by chance, and the query became "fruits eq 2").
        if let plain = ProbeDecoder.primitiveName(Value.self),
            let stored = marked.first(where: { $0.leaf.path == [field] })?.leaf.type, stored != plain
        {
            throw SyncError(
                .invalidQuery,
                "a key path of \(model) cannot be queried: it is not a stored property "
                    + "(it is computed from the field '\(field)')")
        }
        // A date the model's own `init(from:)` reads from another kind of value (seconds since 1970, say) is
        // not what typed queries compare it with (the model encoder's ISO 8601 text): said so, rather than
        // "computed" below.
        if ProbeDecoder.isDate(Value.self), let stored = marked.first(where: { $0.leaf.path == [field] })?.leaf.type,
            !ProbeDecoder.isDate(stored)
        {
            throw SyncError(
                .invalidQuery,
                "a key path of \(model) cannot be queried: the model decodes the date of '\(field)' from a "
                    + "\(stored.split(separator: ".").last ?? "value") (its own init(from:)), and typed queries compare "
                    + "dates as ISO 8601 text, as the model encoder stores them; query '\(field)' with the untyped builder"
            )
        }
        // A computed property that reads one field (`var open: Bool { !done }`) changes with it, but does not
        // hold the values the field was decoded from.
        if let decodable = Value.self as? any Decodable.Type {
            func sample(_ mode: ProbeMode) -> Value? {
                (try? ProbeDecoder(path: [field], mode: mode).decode(decodable)) as? Value
            }
            let holdsTheField =
                sample(.probe([])) == unmarked
                && marked.allSatisfy { probe in
                    probe.leaf.path.first != field
                        || sample(.probe(probe.leaf.path)) == probe.instance[keyPath: keyPath]
                }
            if !holdsTheField {
                throw SyncError(
                    .invalidQuery,
                    "a key path of \(model) cannot be queried: it is not a stored property "
                        + "(it is computed from the field '\(field)')")
            }
        }
        return field
    }
}

/// The probes made so far, one per model type.
enum FieldProbes {
    private static let cache = Mutex<[ObjectIdentifier: any Sendable]>([:])

    static func probe<Model: Decodable & Sendable>(_ type: Model.Type) throws(SyncError) -> FieldProbe<Model> {
        if let cached = cache.withLock({ $0[ObjectIdentifier(type)] }) as? FieldProbe<Model> { return cached }
        let probe = try FieldProbe<Model>()
        cache.withLock { $0[ObjectIdentifier(type)] = probe }
        return probe
    }

    /// The field name of a key path of `Model`.
    static func field<Model: Decodable & Sendable, Value: Equatable>(
        _ keyPath: KeyPath<Model, Value>
    ) throws(SyncError) -> String {
        try probe(Model.self).field(of: keyPath)
    }
}

/// The path of one stored value (keys from the model down), and the type decoded there.
struct ProbeLeaf: Sendable {
    var path: [String]
    /// The type's full name (`String(reflecting:)`); empty for an array.
    var type: String
}

/// The stored values the unmarked decoding met.
final class ProbeRecorder: Sendable {
    let leaves = Mutex<[ProbeLeaf]>([])

    func record(_ path: [String], _ type: Any.Type?) {
        leaves.withLock { leaves in
            if !leaves.contains(where: { $0.path == path }) {
                leaves.append(ProbeLeaf(path: path, type: type.map { String(reflecting: $0) } ?? ""))
            }
        }
    }
}
