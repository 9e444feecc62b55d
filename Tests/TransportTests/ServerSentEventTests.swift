import SyncCore
import Testing

@testable import Transport

@Suite("Transport: Server-Sent Events")
struct ServerSentEventTests {
    @Test func eventsAreParsedWhateverPiecesTheyArriveIn() throws {
        let text =
            "retry: 2000\r\nevent: ready\r\nid: todo=1\r\ndata: {\"tables\":\r\ndata: {\"todo\":1}}\r\n\r\n"
            + ": heartbeat\n\n" + "event: change\rid: todo=2\rdata: {\"table\":\"todo\",\"version\":2}\r\r"
            + "data: no name, the id carries over\n\n" + "data:unspaced\nignored: field\n\n" + "event: partial\ndata: x"
        let bytes = Array(text.utf8)
        // Whole, and byte by byte (a CRLF split between two pieces is one line break).
        var whole = ServerSentEventParser()
        let expected = try whole.parse(bytes)
        var split = ServerSentEventParser()
        var pieces: [ServerSentEvent] = []
        for byte in bytes { pieces += try split.parse([byte]) }
        #expect(pieces == expected)
        #expect(
            expected == [
                ServerSentEvent(name: "ready", data: "{\"tables\":\n{\"todo\":1}}", id: "todo=1"),
                ServerSentEvent(name: "change", data: "{\"table\":\"todo\",\"version\":2}", id: "todo=2"),
                ServerSentEvent(name: "message", data: "no name, the id carries over", id: "todo=2"),
                ServerSentEvent(name: "message", data: "unspaced", id: "todo=2"),
            ])
    }

    @Test func theReconnectionTimeIsTheLastRetryOfDigitsOnly() throws {
        var parser = ServerSentEventParser()
        #expect(parser.reconnectionTime == nil)
        _ = try parser.parse(Array("retry: 2000\n\n".utf8))
        #expect(parser.reconnectionTime == .seconds(2))
        // Not digits only: ignored, as the format says.
        _ = try parser.parse(Array("retry: 2s\nretry: -5\nretry:\nretry: 1e3\n\n".utf8))
        #expect(parser.reconnectionTime == .seconds(2))
        _ = try parser.parse(Array("retry:750\n".utf8))
        #expect(parser.reconnectionTime == .milliseconds(750))
    }

    @Test func feedEventsAreReadFromTheirData() throws {
        #expect(
            try HTTPRemote.changeEvent(
                ServerSentEvent(name: "ready", data: #"{"tables":{"a":3,"b":0}}"#, id: "a=3;b=0"))
                == .ready(versions: ["a": 3, "b": 0], position: "a=3;b=0"))
        #expect(
            try HTTPRemote.changeEvent(ServerSentEvent(name: "change", data: #"{"table":"a","version":4}"#, id: "a=4"))
                == .changed(table: "a", version: 4, position: "a=4"))
        // Events this client does not know are skipped.
        #expect(try HTTPRemote.changeEvent(ServerSentEvent(name: "later", data: "{}", id: "a=4")) == nil)
        #expect(try HTTPRemote.changeEvent(ServerSentEvent(name: "message", data: "hello")) == nil)
        // The protocol's events not as it says end the feed: skipped, a `ready` that could not be
        // read left the device waiting for a feed that would never be ready.
        for event in [
            ServerSentEvent(name: "change", data: #"{"table":"a","version":4}"#),
            ServerSentEvent(name: "change", data: "not\njson", id: "a=4"),
            ServerSentEvent(name: "change", data: #"{"table":"a","version":"4"}"#, id: "a=4"),
            ServerSentEvent(name: "ready", data: "{oops", id: "a=1"),
            ServerSentEvent(name: "ready", data: #"{"versions":{}}"#, id: "a=1"),
            ServerSentEvent(name: "caught-up", data: "{}"),
        ] {
            let error = #expect(throws: RemoteError.self, "\(event)") { try HTTPRemote.changeEvent(event) }
            #expect(error?.message.contains("\n") == false, "one line: \(String(describing: error))")
        }
    }

    /// An event may take ``ServerSentEventParser/maximumEventSize`` bytes, comments included; past
    /// it the parse fails. Cut and read on, a line or an event that never ended kept a core busy
    /// reading gigabytes while the device waited.
    @Test func aFeedThatDoesNotEndItsEventsFails() throws {
        let limit = ServerSentEventParser.maximumEventSize
        let endless: [(String, [UInt8])] = [
            ("a line that never ends", Array("data: ".utf8) + Array(repeating: UInt8(ascii: "x"), count: 4096)),
            ("data lines without a blank line", Array("data: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n".utf8)),
            ("comments without a blank line", Array(":zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\n".utf8)),
        ]
        for (what, piece) in endless {
            var parser = ServerSentEventParser()
            var read = 0
            var failed = false
            while read <= 2 * limit {
                do {
                    #expect(try parser.parse(piece).isEmpty, "\(what)")
                } catch {
                    failed = true
                    break
                }
                read += piece.count
            }
            #expect(failed, "\(what): \(read) bytes read without a failure")
            #expect(read <= limit, "\(what): failed only after \(read) bytes")
        }
        // Heartbeats and events of any number, each under the limit, never add up to it.
        var parser = ServerSentEventParser()
        let event = Array("event: change\nid: a=1\ndata: {\"table\":\"a\",\"version\":1}\n\n: heartbeat\n\n".utf8)
        var events = 0
        for _ in 0..<(2 * limit / event.count) { events += try parser.parse(event).count }
        #expect(events == 2 * limit / event.count)
        // An event just under the limit is read whole.
        let data = String(repeating: "d", count: limit - 100)
        #expect(try parser.parse(Array("data: \(data)\n\n".utf8)).first?.data == data)
    }
}
