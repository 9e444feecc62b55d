import Crypto
import Foundation
import Logging
import ServerStorageCore
import ServerTestSupport
import SyncCore
import Synchronization
import Testing

@testable import FerryServer

/// The upload routes' limits: a 413 naming the limit, and uploads side by side within the limits of
/// a user and of the tables without users.
extension AttachmentUploadTests {
    @Test func limitsAnswer413NamingTheLimit() async throws {
        let live = try await Self.start(
            limits: AttachmentLimits(maximumFileSize: 1_000, maximumItemSize: 1_500, maximumUserSize: 2_000))
        let big = Self.file(1_001)
        let tooBig = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(big, complete: false))
        #expect(tooBig.status == 413 && tooBig.json?["code"] == "maxFileSize", "\(tooBig.text)")
        #expect(tooBig.header("Upload-Limit") == "max-size=1000", "\(tooBig.headers)")
        let file = Self.file(1_000)
        let stored = try await live.send(
            "PUT", Self.path, headers: Self.auth("alice") + Self.creation(file, complete: true), body: file)
        #expect(stored.status == 200, "\(stored.text)")
        let second = Self.file(600, seed: 3)
        let item = try await live.send(
            "PUT", "/tables/notes/a1/$attachments/b.bin",
            headers: Self.auth("alice") + Self.creation(second, complete: false))
        #expect(item.status == 413 && item.json?["code"] == "maxItemSize", "\(item.text)")
        try await live.stop()
    }

    /// Uploads created side by side are each within the limits alone: the limits are checked
    /// again as each completes, so the second to complete is refused (two devices adding a photo
    /// to one item put 40 MB on an item of 30).
    @Test(arguments: ServerBackend.allCases)
    func uploadsCompletedSideBySideStayWithinTheLimits(_ backend: ServerBackend) async throws {
        let live = try await Self.start(
            limits: AttachmentLimits(maximumFileSize: 1_000, maximumItemSize: 1_500, maximumUserSize: 2_500),
            backend: backend)
        func create(_ path: String, _ bytes: [UInt8]) async throws -> String {
            let created = try await live.send(
                "PUT", path, headers: Self.auth("alice") + Self.creation(bytes, complete: false))
            #expect(created.status == 201, "\(created.text)")
            return try #require(created.header("Location"))
        }
        func complete(_ location: String, _ bytes: [UInt8]) async throws -> LiveServer.Reply {
            try await live.send(
                "PATCH", location,
                headers: Self.auth("alice") + [
                    ("Content-Type", "application/partial-upload"), ("Upload-Offset", "0"), ("Upload-Complete", "?1"),
                ], body: bytes)
        }
        let (one, two) = (Self.file(1_000, seed: 1), Self.file(1_000, seed: 2))
        let first = try await create("/tables/notes/a1/$attachments/one.bin", one)
        let second = try await create("/tables/notes/a1/$attachments/two.bin", two)
        #expect(try await complete(first, one).status == 200)
        let refused = try await complete(second, two)
        #expect(refused.status == 413 && refused.json?["code"] == "maxItemSize", "\(refused.text)")
        let list = try await live.send("GET", "/tables/notes/a1/$attachments", headers: Self.auth("alice"))
        #expect(AttachmentRouteTests.names(list) == ["one.bin"])

        // The user's limit counts unfinished uploads in when an upload is created: they held
        // what they liked until they expired (a probe held 480 MB under a quota of 50 MB).
        try await Self.insertNotes([("alice", "a2"), ("alice", "a3")], into: live)
        let (three, four) = (Self.file(900, seed: 3), Self.file(900, seed: 4))
        let third = try await create("/tables/notes/a2/$attachments/three.bin", three)  // 1,000 held, 900 reserved
        let fourPath = "/tables/notes/a3/$attachments/four.bin"
        let early = try await live.send(
            "PUT", fourPath, headers: Self.auth("alice") + Self.creation(four, complete: false))
        #expect(early.status == 413 && early.json?["code"] == "maxUserSize", "\(early.text)")
        #expect(
            early.text.contains("the user's attachments and 900 bytes of unfinished uploads would pass it"),
            "\(early.text)")
        // Another user's uploads are his own.
        let bobs = try await live.send(
            "PUT", "/tables/notes/b1/$attachments/b.bin",
            headers: Self.auth("bob") + Self.creation(four, complete: false))
        #expect(bobs.status == 201, "\(bobs.text)")
        // The third, cancelled, reserves nothing any more.
        #expect(try await live.send("DELETE", third, headers: Self.auth("alice")).status == 204)
        let fourth = try await create(fourPath, four)
        // Created again (a client that lost its Location): it does not count against itself.
        #expect(try await create(fourPath, four) == fourth)
        #expect(try await complete(fourth, four).status == 200)
        #expect(try await complete(third, three).status == 404)
        try await live.stop()
    }

    /// Completion checks the user's limit again: uploads created side by side (each within it
    /// alone, before the other was created) cannot both be kept past it.
    @Test(arguments: ServerBackend.allCases)
    func uploadsCreatedSideBySideStayWithinTheUserLimit(_ backend: ServerBackend) async throws {
        let live = try await Self.start(
            limits: AttachmentLimits(maximumFileSize: 1_000, maximumItemSize: 1_500, maximumUserSize: 2_000),
            backend: backend)
        try await Self.insertNotes([("alice", "a2"), ("alice", "a3")], into: live)
        let files = (1...3).map { Self.file(900, seed: UInt8(10 + $0)) }
        // Three creations at once: each may see none of the others reserved.
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for (index, item) in ["a1", "a2", "a3"].enumerated() {
                group.addTask {
                    let path = "/tables/notes/\(item)/$attachments/f.bin"
                    let created = try await live.send(
                        "PUT", path, headers: Self.auth("alice") + Self.creation(files[index], complete: true),
                        body: files[index])
                    return created.status
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(statuses.filter { $0 == 200 }.count == 2, "\(statuses)")
        #expect(statuses.allSatisfy { $0 == 200 || $0 == 413 }, "\(statuses)")
        var held = 0
        for item in ["a1", "a2", "a3"] {
            let list = try await live.send("GET", "/tables/notes/\(item)/$attachments", headers: Self.auth("alice"))
            held += AttachmentRouteTests.names(list).count
        }
        #expect(held == 2)
        try await live.stop()
    }

    /// Uploads created side by side, each left unfinished, count against the user's limit as if
    /// they had come one after the other: twenty at once each saw none of the others reserved.
    @Test(arguments: ServerBackend.allCases)
    func unfinishedUploadsCreatedSideBySideStayWithinTheUserLimit(_ backend: ServerBackend) async throws {
        let live = try await Self.start(
            limits: AttachmentLimits(maximumFileSize: 1_000, maximumItemSize: 2_000, maximumUserSize: 2_000),
            backend: backend)
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<12 {
                group.addTask {
                    let file = Self.file(900, seed: UInt8(index))
                    return try await live.send(
                        "PUT", "/tables/notes/a1/$attachments/f\(index).bin",
                        headers: Self.auth("alice") + Self.creation(file, complete: false)
                    ).status
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(statuses.filter { $0 == 201 }.count == 2, "\(statuses)")
        #expect(statuses.filter { $0 == 413 }.count == 10, "\(statuses)")
        try await live.stop()
    }

    /// Several instances on one PostgreSQL database take turns too: uploads created side by side
    /// through two instances stay within the user's limit (each instance took turns only with
    /// itself, so two creations at the same moment each missed the other's reservation).
    @Test func uploadsSideBySideThroughTwoInstancesStayWithinTheUserLimit() async throws {
        let limits = AttachmentLimits(maximumFileSize: 1_000, maximumItemSize: 2_000, maximumUserSize: 2_000)
        let first = try await Self.start(limits: limits, backend: .postgreSQL)
        let second = try await Self.start(limits: limits, sharing: first)
        let instances = [first, second]
        // A user of their own each round: six uploads of 900 bytes against 2,000, three through
        // each instance; unfinished ones (reservations) and whole files in turn.
        for round in 0..<6 {
            let user = "user\(round)"
            let items = (0..<6).map { "r\(round)i\($0)" }
            try await Self.insertNotes(items.map { (user, $0) }, into: first)
            let whole = round % 2 == 1
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for (index, item) in items.enumerated() {
                    group.addTask {
                        let file = Self.file(900, seed: UInt8(round * 10 + index))
                        return try await instances[index % 2].send(
                            "PUT", "/tables/notes/\(item)/$attachments/f.bin",
                            headers: Self.auth(user) + Self.creation(file, complete: whole), body: whole ? file : []
                        ).status
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == (whole ? 200 : 201) }.count == 2, "round \(round): \(statuses)")
            #expect(statuses.filter { $0 == 413 }.count == 4, "round \(round): \(statuses)")
        }
        try await second.stop()
        try await first.stop()
    }

    /// The tables without users share one quota, apart from the users' own: a user's attachments
    /// on per-user tables counted against every upload to a shared table (once the users together
    /// held the quota, no shared table could take a file).
    @Test func theTablesWithoutUsersShareAQuotaOfTheirOwn() async throws {
        let live = try await LiveServer.start(
            tables: [Self.notes, TableSettings(name: "board")],
            attachments: AttachmentLimits(maximumFileSize: 1_000, maximumItemSize: 2_000, maximumUserSize: 2_000))
        try await Self.insertNotes([("alice", "a1"), ("alice", "a2")], into: live)
        for id in ["s1", "s2", "s3"] {
            #expect(try await live.send("POST", "/tables/board", json: ["id": .string(id)]).status == 201)
        }
        func put(_ path: String, _ file: [UInt8], complete: Bool, as user: String?) async throws -> LiveServer.Reply {
            try await live.send(
                "PUT", path, headers: (user.map(Self.auth) ?? []) + Self.creation(file, complete: complete),
                body: complete ? file : [])
        }
        for name in ["one", "two"] {  // alice's quota, full
            let file = Self.file(900, seed: UInt8(name.count))
            #expect(
                try await put("/tables/notes/a1/$attachments/\(name)", file, complete: true, as: "alice").status == 200)
        }
        let third = try await put("/tables/notes/a2/$attachments/three", Self.file(900), complete: false, as: "alice")
        #expect(third.status == 413 && third.text.contains("the user's attachments"), "\(third.text)")
        #expect(try await put("/tables/board/s1/$attachments/f", Self.file(900), complete: true, as: nil).status == 200)
        let bobs = try await put("/tables/board/s2/$attachments/f", Self.file(900, seed: 9), complete: false, as: "bob")
        #expect(bobs.status == 201, "\(bobs.text)")
        let over = try await put("/tables/board/s3/$attachments/f", Self.file(900, seed: 8), complete: false, as: nil)
        #expect(over.status == 413, "\(over.text)")
        #expect(
            over.text.contains("the attachments of the tables without users and 900 bytes of unfinished uploads"),
            "\(over.text)")
        try await live.stop()
    }
}
