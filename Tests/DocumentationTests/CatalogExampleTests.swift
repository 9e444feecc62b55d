import Foundation
import StoreLMDB
import StoreMemory
import StoreSQLite
import StoreConformance
import SyncCore
import SyncTesting
import Testing
import Transport

/// The examples of the DocC catalogs' landing pages (Modules/*/*.docc), kept compiling: each test
/// holds its page's example as written there, with `remote` and `directory` supplied here.
@Suite("Documentation examples")
struct CatalogExampleTests {
    @Test func theStoreMemoryExampleCompilesAndSyncs() async throws {
        let server = ModelServer()
        let remote = server.remote()

        let store = MemoryStore()
        let context = SyncContext(store: store, remote: remote)  // remote: any RemoteService

        _ = try await context.table("todo").insert(["title": "Milk"])
        try await context.push()
        #expect(server.rows("todo").count == 1)
    }

    @Test func theStoreSQLiteExampleCompilesAndSyncs() async throws {
        try await syncsOneInsert { directory, remote in
            let store = try SQLiteStore(path: directory + "/app.ferry")
            let context = SyncContext(store: store, remote: remote)  // remote: any RemoteService
            return (store, context)
        }
    }

    @Test func theStoreLMDBExampleCompilesAndSyncs() async throws {
        try await syncsOneInsert { directory, remote in
            let store = try LMDBStore(path: directory + "/app-lmdb")
            let context = SyncContext(store: store, remote: remote)  // remote: any RemoteService
            return (store, context)
        }
    }

    /// Runs a persistent store's example in a temporary directory: one insert, pushed.
    func syncsOneInsert(
        _ example: (_ directory: String, _ remote: any RemoteService) throws -> (any LocalStore, SyncContext)
    ) async throws {
        let server = ModelServer()
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let (store, context) = try example(temporary.path, server.remote())
        _ = try await context.table("todo").insert(["title": "Milk"])
        try await context.push()
        try await store.close()
        #expect(server.rows("todo").count == 1)
    }

    /// Compiled, not run: it would need a server at example.org.
    func theTransportExampleCompiles(directory: String) async throws {
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: "https://example.org")!))
        let context = SyncContext(store: try SQLiteStore(path: directory + "/app.ferry"), remote: remote)
        let todos = try await remote.table("todo").query(TableQuery())  // online, no store
        _ = (context, todos)
    }
}

/// The examples of doc comments that the three review findings named, kept compiling.
@Suite("Doc comment examples")
struct DocCommentExampleTests {
    /// `SyncContext.init(store:conflictHandler:logger:remote:)`.
    @Test func theContextFromAClosureExampleCompilesAndSyncs() async throws {
        let server = ModelServer()
        let remote = server.remote()
        let auditRemote = server.remote(device: "auditor")

        // Any RemoteTable per name: here Transport's, with a header only the "audit" table needs.
        let context = SyncContext(store: MemoryStore(), conflictHandler: .serverWins) { name in
            name == "audit" ? auditRemote.table(name) : remote.table(name)
        }

        _ = try await context.table("audit").insert(["what": "login"])
        try await context.push()
        #expect(server.rows("audit").count == 1)
    }

    /// `SQLiteStore`'s type documentation.
    @Test func theSQLiteStoreExampleRuns() async throws {
        let temporary = try TemporaryDirectory()
        defer { temporary.remove() }
        let directory = temporary.path

        let store = try SQLiteStore(path: directory + "/app.ferry")  // or SQLiteStore(location: .memory)
        try await store.write { tx in
            try tx.upsert("todo", [["id": "1", "title": "Milk", "done": false]])
            _ = try tx.appendOperation(OperationDraft(table: "todo", itemID: "1", kind: .insert))
        }
        let open = try await store.query("todo", TableQuery().filter(.field("done").eq(false)))
        try await store.close()

        #expect(open.items.map(\.id) == ["1"])
    }

    /// `HTTPRemote`'s type documentation (compiled, not run: it needs a server and an `auth`).
    func theHTTPRemoteExampleCompiles(store: any LocalStore, auth: some TokenSource) async throws {
        let remote = HTTPRemote(
            HTTPRemote.Configuration(serverURL: URL(string: "https://example.com")!, protocolVersion: .v3),
            tokenProvider: { forceRefresh in try await auth.token(refresh: forceRefresh) })
        let context = SyncContext(store: store, remote: remote)
        let todos = remote.table("todo")  // online: no local store involved
        let page = try await todos.query(TableQuery().filter(.field("done").eq(false)))
        _ = (context, page)
    }
}

/// What the HTTPRemote example calls `auth`: anything that hands out tokens.
protocol TokenSource: Sendable {
    func token(refresh: Bool) async throws -> String?
}
