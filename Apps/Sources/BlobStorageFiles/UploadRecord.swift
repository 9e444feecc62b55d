import Crypto
import Foundation
import ServerStorageCore

/// The state of one upload on disk (`uploads/<id>.state`): two slots of one record each, at
/// offsets 0 and 4096, written in turn.
///
/// Each write takes the slot the previous write did not use, with a sequence number one higher and
/// a checksum, then syncs the file; a reader takes the valid slot with the highest sequence. A write
/// torn by a power loss therefore damages at most the slot being written, and the other one still
/// holds the state before it (whose offset counts only bytes that were synced).
///
/// A slot (120 bytes, little-endian): `FRBU`, format 1 (u32), sequence (u64), length, offset,
/// createdAt and updatedAt in milliseconds (i64 each), a completed flag (u8), the blob's SHA-256
/// (32 bytes, zero before completion), 7 zero bytes, then the SHA-256 of the 88 bytes before.
struct UploadRecord: Equatable {
    var sequence: UInt64
    var length: Int64
    var offset: Int64
    var createdAt: Int64
    var updatedAt: Int64
    /// The blob's SHA-256 in hex, once completed.
    var completedSHA256: String?

    static let slotSize = 120
    static let slotStride: Int64 = 4096
    static let magic: [UInt8] = Array("FRBU".utf8)
    static let format: UInt32 = 1

    /// The slot this record is written to.
    var slot: Int64 { Int64(sequence % 2) * Self.slotStride }

    func encoded() -> [UInt8] {
        var bytes = Self.magic
        bytes.reserveCapacity(Self.slotSize)
        Self.put(UInt64(Self.format), 4, into: &bytes)
        Self.put(sequence, 8, into: &bytes)
        for value in [length, offset, createdAt, updatedAt] { Self.put(UInt64(bitPattern: value), 8, into: &bytes) }
        bytes.append(completedSHA256 == nil ? 0 : 1)
        bytes += completedSHA256.flatMap(Self.digestBytes) ?? [UInt8](repeating: 0, count: 32)
        bytes += [UInt8](repeating: 0, count: 7)
        bytes += Array(SHA256.hash(data: bytes))
        return bytes
    }

    /// The record in `slot`, or `nil` when the slot is empty, torn or damaged.
    static func decode(_ slot: [UInt8]) -> UploadRecord? {
        guard slot.count == slotSize, Array(slot[0..<4]) == magic,
            Array(SHA256.hash(data: slot[0..<88])) == Array(slot[88..<120]),
            get(slot, 4, 4) == UInt64(format)
        else { return nil }
        let completed = slot[48] == 1
        return UploadRecord(
            sequence: get(slot, 8, 8), length: Int64(bitPattern: get(slot, 16, 8)),
            offset: Int64(bitPattern: get(slot, 24, 8)), createdAt: Int64(bitPattern: get(slot, 32, 8)),
            updatedAt: Int64(bitPattern: get(slot, 40, 8)),
            completedSHA256: completed ? BlobNames.hex(slot[49..<81]) : nil)
    }

    /// The newest valid record of the two slots.
    static func newest(_ first: [UInt8], _ second: [UInt8]) -> UploadRecord? {
        switch (decode(first), decode(second)) {
        case (let a?, let b?): a.sequence >= b.sequence ? a : b
        case (let a?, nil): a
        case (nil, let b?): b
        case (nil, nil): nil
        }
    }

    private static func put(_ value: UInt64, _ width: Int, into bytes: inout [UInt8]) {
        for index in 0..<width { bytes.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(index)))) }
    }

    private static func get(_ bytes: [UInt8], _ at: Int, _ width: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<width { value |= UInt64(bytes[at + index]) << (8 * UInt64(index)) }
        return value
    }

    private static func digestBytes(_ hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count == 64 else { return nil }
        func nibble(_ c: UInt8) -> UInt8 { c <= 0x39 ? c - 0x30 : c - 0x61 + 10 }
        return (0..<32).map { nibble(digits[2 * $0]) << 4 | nibble(digits[2 * $0 + 1]) }
    }
}
