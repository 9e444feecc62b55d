import SyncCore
import Testing

@testable import Transport

@Suite("Transport: Server-Sent Events")
struct ServerSentEventTests {
    @Test func eventsAreParsedWhateverPiecesTheyArriveIn() {
        let text =
            "retry: 2000\r\nevent: ready\r\nid: todo=1\r\ndata: {\"tables\":\r\ndata: {\"todo\":1}}\r\n\r\n"
            + ": heartbeat\n\n" + "event: change\rid: todo=2\rdata: {\"table\":\"todo\",\"version\":2}\r\r"
            + "data: no name, the id carries over\n\n" + "data:unspaced\nignored: field\n\n" + "event: partial\ndata: x"
        let bytes = Array(text.utf8)
        // Whole, and byte by byte (a CRLF split between two pieces is one line break).
        var whole = ServerSentEventParser()
        let expected = whole.parse(bytes)
        var split = ServerSentEventParser()
        var pieces: [ServerSentEvent] = []
        for byte in bytes { pieces += split.parse([byte]) }
        #expect(pieces == expected)
        #expect(
            expected == [
                ServerSentEvent(name: "ready", data: "{\"tables\":\n{\"todo\":1}}", id: "todo=1"),
                ServerSentEvent(name: "change", data: "{\"table\":\"todo\",\"version\":2}", id: "todo=2"),
                ServerSentEvent(name: "message", data: "no name, the id carries over", id: "todo=2"),
                ServerSentEvent(name: "message", data: "unspaced", id: "todo=2"),
            ])
    }

    @Test func theReconnectionTimeIsTheLastRetryOfDigitsOnly() {
        var parser = ServerSentEventParser()
        #expect(parser.reconnectionTime == nil)
        _ = parser.parse(Array("retry: 2000\n\n".utf8))
        #expect(parser.reconnectionTime == .seconds(2))
        // Not digits only: ignored, as the format says.
        _ = parser.parse(Array("retry: 2s\nretry: -5\nretry:\nretry: 1e3\n\n".utf8))
        #expect(parser.reconnectionTime == .seconds(2))
        _ = parser.parse(Array("retry:750\n".utf8))
        #expect(parser.reconnectionTime == .milliseconds(750))
    }

    @Test func feedEventsAreReadFromTheirData() {
        #expect(
            HTTPRemote.changeEvent(ServerSentEvent(name: "ready", data: #"{"tables":{"a":3,"b":0}}"#, id: "a=3;b=0"))
                == .ready(versions: ["a": 3, "b": 0], position: "a=3;b=0"))
        #expect(
            HTTPRemote.changeEvent(ServerSentEvent(name: "change", data: #"{"table":"a","version":4}"#, id: "a=4"))
                == .changed(table: "a", version: 4, position: "a=4"))
        // Unknown events, events without an id and malformed data are skipped, not fatal.
        #expect(HTTPRemote.changeEvent(ServerSentEvent(name: "later", data: "{}", id: "a=4")) == nil)
        #expect(HTTPRemote.changeEvent(ServerSentEvent(name: "change", data: #"{"table":"a","version":4}"#)) == nil)
        #expect(HTTPRemote.changeEvent(ServerSentEvent(name: "change", data: "not json", id: "a=4")) == nil)
    }
}
