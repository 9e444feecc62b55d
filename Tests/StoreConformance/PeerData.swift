import Foundation
public import SyncCore
public import Testing

/// Finds the peer conformance data that lives beside the project, at `../shared/peer-data`, or
/// wherever `$FERRY_PEER_DATA` points. It is never copied into the project: tests that use it skip
/// with a visible notice when it is absent.
public enum PeerData: Sendable {
    /// The directory holding `query-cases.json` and friends, or `nil` when it cannot be found.
    public static let directory: String? = {
        var candidates: [String] = []
        if let explicit = ProcessInfo.processInfo.environment["FERRY_PEER_DATA"], !explicit.isEmpty {
            candidates.append(explicit)
        }
        // This file is Tests/StoreConformance/PeerData.swift: the package root is two levels up.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        candidates.append(root.appendingPathComponent("../shared/peer-data").standardized.path)
        candidates.append(
            URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent("../shared/peer-data")
                .standardized.path)
        return candidates.first { FileManager.default.fileExists(atPath: $0 + "/query-cases.json") }
    }()

    /// Whether the peer data was found.
    public static var isAvailable: Bool { directory != nil }

    /// The notice tests show when they skip for lack of peer data.
    public static let missingNotice: Comment =
        "SKIPPED: peer data not found at ../shared/peer-data (set FERRY_PEER_DATA to its directory)"

    /// Loads and parses one JSON file of the peer data.
    public static func load(_ name: String) throws -> JSONValue {
        guard let directory else { throw PeerDataError(message: "peer data not found; set FERRY_PEER_DATA") }
        let data = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))
        return try JSONValue(parsingUTF8: data)
    }
}

/// The peer data is missing or not as expected.
public struct PeerDataError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
