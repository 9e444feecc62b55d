import Crypto
import ServerStorageCore
import Testing

@testable import FerryServer

/// Upload tickets: the state of an upload carried in its URL, unforgeable (issue 30).
@Suite("Upload tickets")
struct UploadTicketTests {
    static let ticket = UploadTicket(
        owner: "alice", table: "notes", item: "a/1 é", name: "photo.jpg", sha256: String(repeating: "ab", count: 32),
        length: 5_000_000, contentType: "image/jpeg")

    @Test func aTicketRoundTripsAndIsTheSameForTheSameUpload() throws {
        let key = UploadTicket.key(authSecret: "secret-0123456789abcdef")
        let token = Self.ticket.token(key: key)
        #expect(UploadTicket(token: token, key: key) == Self.ticket)
        #expect(Self.ticket.token(key: key) == token, "the same upload, the same ticket: a lost Location comes back")
        #expect(token.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." })
        let id = Self.ticket.uploadID(key: key)
        // `u`, the uploader's tag, `-`, the signature: one user's unfinished uploads share a prefix.
        let prefix = UploadTicket.quotaPrefix(.owner("alice"), key: key)
        #expect(prefix.count == 18 && prefix.hasPrefix("u") && prefix.hasSuffix("-"))
        #expect(id.hasPrefix(prefix) && id.count == 82 && id.dropFirst(18).allSatisfy(\.isHexDigit))
        #expect(UploadTicket.quotaPrefix(.owner("bob"), key: key) != prefix)
        // An upload to a table without users counts against their shared quota.
        var shared = Self.ticket
        shared.shared = true
        #expect(UploadTicket(token: shared.token(key: key), key: key) == shared)
        #expect(shared.uploadID(key: key).hasPrefix(UploadTicket.quotaPrefix(.all, key: key)))
        #expect(UploadTicket.quotaPrefix(.all, key: key) != UploadTicket.quotaPrefix(.owner(""), key: key))
        var anonymous = Self.ticket
        anonymous.owner = nil
        #expect(UploadTicket(token: anonymous.token(key: key), key: key)?.owner == nil)
        #expect(anonymous.uploadID(key: key) != id)
        #expect(anonymous.uploadID(key: key).hasPrefix(UploadTicket.quotaPrefix(.owner(""), key: key)))
    }

    @Test func aChangedOrForeignTicketIsRefused() throws {
        let key = UploadTicket.key(authSecret: "secret-0123456789abcdef")
        let token = Self.ticket.token(key: key)
        // Another user's name in the payload, with the old signature.
        var bob = Self.ticket
        bob.owner = "bob"
        let forged = bob.token(key: key).split(separator: ".")[0] + "." + token.split(separator: ".")[1]
        #expect(UploadTicket(token: String(forged), key: key) == nil)
        #expect(UploadTicket(token: token, key: UploadTicket.key(authSecret: "another-secret-0123456")) == nil)
        for garbage in ["", ".", "a.b", token + "x", "x" + token, String(repeating: "A", count: 10_000) + ".AA"] {
            #expect(UploadTicket(token: garbage, key: key) == nil, "\(garbage.prefix(20))")
        }
    }
}
