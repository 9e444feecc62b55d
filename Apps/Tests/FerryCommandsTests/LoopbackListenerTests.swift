import Foundation
import ServerTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The tests' own loopback listener must not steal connections from the other tests of the
/// process: `ReplInterruptTests` failed in CI when its silent server's connection "was lost".
@Suite("The tests' loopback listener", .timeLimit(.minutes(3)))
struct LoopbackListenerTests {
    /// A listener stopped at once after it started (as `unreachableURL()` does) had its descriptor
    /// closed while its accepting thread had not yet called `accept`: that thread then accepted,
    /// and closed, the connections of whatever socket reused the number next.
    @Test func aStoppedListenerNeverTakesTheConnectionsOfTheNextSocket() throws {
        for _ in 0..<200 {
            let listener = try LoopbackListener()
            listener.start { close($0) }
            listener.stop()
            let (next, port) = try ReplInterruptTests.silentServer()
            defer { close(next) }
            let client = try #require(LoopbackSockets.connect(port: port))
            defer { close(client) }
            var waiting = pollfd(fd: next, events: Int16(POLLIN), revents: 0)
            let ready = poll(&waiting, 1, 2_000)
            try #require(ready == 1, "the connection never reached the socket it was made to")
            let accepted = accept(next, nil, nil)
            #expect(accepted >= 0)
            close(accepted)
        }
    }
}
