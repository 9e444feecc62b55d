import Foundation
import ServerStorageCore
import SyncCore

/// RFC 9110 conditional requests against an item: `If-Match`, `If-None-Match`,
/// `If-Modified-Since` and `If-Unmodified-Since`, in the order the RFC evaluates them.
struct Preconditions {
    let headers: RequestHeaders

    init(_ headers: RequestHeaders) { self.headers = headers }

    enum Outcome: Equatable {
        case proceed
        /// A read of an unchanged item: 304.
        case notModified
        /// 412, with the reason.
        case failed(String)
    }

    /// A strong comparison: `*` matches any item, weak tags never match; quotes are optional (the
    /// Node server accepted a bare version).
    static func matches(_ header: String, _ item: StoredItem) -> Bool {
        for tag in entityTags(header) {
            if tag == "*" { return true }
            if tag.hasPrefix("W/") { continue }
            var bare = Substring(tag)
            if bare.count >= 2, bare.hasPrefix("\""), bare.hasSuffix("\"") { bare = bare.dropFirst().dropLast() }
            if bare == item.versionTag { return true }
        }
        return false
    }

    /// The entries of an `If-Match` or `If-None-Match` list, white space around them removed.
    static func entityTags(_ header: String) -> [String] {
        header.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    }

    func evaluate(_ item: StoredItem, isRead: Bool) -> Outcome {
        let modifiedSeconds = Self.seconds(item.updatedAt)
        if let ifMatch = headers.list("if-match") {
            if !Self.matches(ifMatch, item) { return .failed("If-Match does not match the item's version") }
        } else if let header = headers["if-unmodified-since"], let date = HTTPDate.parse(header), modifiedSeconds > date
        {
            return .failed("the item was modified after If-Unmodified-Since")
        }
        if let ifNoneMatch = headers.list("if-none-match") {
            if Self.matches(ifNoneMatch, item) {
                return isRead ? .notModified : .failed("If-None-Match matches the item's version")
            }
        } else if let header = headers["if-modified-since"], let date = HTTPDate.parse(header), modifiedSeconds <= date
        {
            return isRead ? .notModified : .failed("the item was not modified since If-Modified-Since")
        }
        return .proceed
    }

    static func seconds(_ timestamp: Timestamp) -> Int64 {
        let milliseconds = timestamp.millisecondsSince1970
        return milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
    }
}
