import FerryClient
import FerryConsole
import FerryServer
import Foundation
import SyncCore
import Testing
import Transport

@testable import FerryCommands

@Suite("ferry conflicts resolve", .timeLimit(.minutes(5)))
struct ConflictResolutionCommandTests {
    /// `--item` names the fields to change in mine, as `update` does: the fields neither device
    /// touched stay on the server. Sent as the whole item, a resolution naming the one field both
    /// devices changed deleted every other field (`priority` and `notes` here).
    @Test func anItemGivenToAResolutionChangesOnlyTheFieldsItNames() async throws {
        let server = try await startServer()
        let (session, transcript, directory) = try await replSession(server, device: "phone")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let script = """
            insert todo '{"id":"pen","title":"Pen","priority":3,"notes":"keep me"}'
            insert todo '{"id":"cup","title":"Cup","priority":1,"notes":"keep me too"}'
            push
            use tablet
            pull todo --query-id all
            update todo pen '{"title":"Blue pen"}'
            update todo cup '{"title":"Big cup"}'
            push
            use phone
            update todo pen '{"title":"Red pen"}'
            update todo cup '{"title":"Small cup"}'
            push
            conflicts resolve pen --take mine --item '{"title":"Pen, red or blue"}'
            conflicts resolve cup --take change --operation update --item '{"title":"Cup, any size"}'
            push
            exit
            """
        let (editor, input) = try scriptedEditor(script)
        _ = await session.run(editor: editor)
        close(input)
        let text = transcript.value
        #expect(text.components(separatedBy: "resolved").count == 3, "\(text)")
        let remote = HTTPRemote(HTTPRemote.Configuration(serverURL: URL(string: server.url)!))
            .onlineTable("todo")
        let pen = try await remote.item(id: "pen")
        #expect(pen?["title"] == "Pen, red or blue", "\(text)")
        #expect(pen?["priority"] == .int(3))
        #expect(pen?["notes"] == "keep me")
        let cup = try await remote.item(id: "cup")
        #expect(cup?["title"] == "Cup, any size", "\(text)")
        #expect(cup?["priority"] == .int(1))
        #expect(cup?["notes"] == "keep me too")
        try await server.shutdown()
    }
}
