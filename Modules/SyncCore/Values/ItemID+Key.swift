extension ItemID {
    /// An item id as a dictionary key or set member: equal to another only when their UTF-8 bytes
    /// are, as the stores and the server compare ids.
    ///
    /// Swift's `String` equality is canonical equivalence: "café" typed on a keyboard (`é`, NFC)
    /// and "café" from a macOS file name (`e` and a combining accent, NFD) are equal `String`s,
    /// though they are two ids and two items on the server and in every store. Code that keys items
    /// by id uses `ItemID.Key`, so the two stay apart.
    ///
    /// ```swift
    /// let nfc = ItemID.Key("caf\u{E9}"), nfd = ItemID.Key("cafe\u{301}")
    /// print(nfc == nfd)                    // false
    /// print("caf\u{E9}" == "cafe\u{301}")  // true
    /// ```
    public struct Key: Hashable, Sendable, CustomStringConvertible {
        /// The id.
        public let id: String

        /// The key of `id`.
        public init(_ id: String) { self.id = id }

        public static func == (lhs: Key, rhs: Key) -> Bool {
            lhs.id.utf8.elementsEqual(rhs.id.utf8)
        }

        public func hash(into hasher: inout Hasher) {
            var id = id
            id.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        }

        public var description: String { id }
    }
}

extension Sequence<String> {
    /// The ids as ``ItemID/Key``s, for a set that keeps apart ids equal only under Unicode
    /// canonical equivalence.
    var itemKeys: Set<ItemID.Key> { Set(map(ItemID.Key.init)) }
}
