import ArgumentParser
import FerryClient
import FerryConsole
import FerryServer
import Foundation
import ServerTestSupport
import SyncCore
import Testing
import Transport

@testable import FerryCommands

/// The REPL as a newcomer meets it: Ctrl-C, the banner and prompt, help and completion.

@Suite("Ctrl-C in the REPL", .timeLimit(.minutes(10)))
struct ReplInterruptTests {
    /// A loopback port that accepts connections and never answers.
    static func silentServer() throws -> (descriptor: Int32, port: Int) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(descriptor, raw, length) == 0 && listen(descriptor, 16) == 0
                    && getsockname(descriptor, raw, &length) == 0
            }
        }
        guard bound else { throw ClientError(.failed, "cannot listen on loopback") }
        return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
    }

    @Test func interruptingAPullReturnsToThePromptWithTheQueueIntact() async throws {
        let (listener, port) = try Self.silentServer()
        defer { close(listener) }
        let transcript = Transcript()
        let session = try ReplSession(
            server: ServerSettings(url: URL(string: "http://127.0.0.1:\(port)")!), policy: .keep, stores: "memory",
            output: transcript.output)
        try await session.use("phone", store: nil)
        let script = """
            insert todo {"id":"milk","title":"Milk"}
            pull todo
            status
            """
        let (editor, input) = try scriptedEditor(script)
        let running = Task { await session.run(editor: editor) }
        // Wait until the pull hangs on the silent server, then press Ctrl-C.
        for _ in 0..<200 where !transcript.value.contains("> pull todo") {
            try await Task.sleep(for: .milliseconds(20))
        }
        try await Task.sleep(for: .milliseconds(300))
        session.interrupt()
        _ = await running.value
        close(input)
        let text = transcript.value
        #expect(text.contains("cancelled"), "\(text)")
        #expect(text.contains("> status"), "the session went on after the interrupted pull: \(text)")
        #expect(text.contains("1 queued operation"), "\(text)")
    }
}

@Suite("REPL banner, prompt and colours", .timeLimit(.minutes(10)))
struct ReplLookTests {
    @Test func theBannerAndThePromptSayWhereYouAre() async throws {
        let session = try ReplSession(
            server: ServerSettings(url: URL(string: "http://127.0.0.1:8080")!), policy: .keep, stores: "memory",
            output: Transcript().output)
        try await session.use("phone", store: nil)
        let banner = await session.banner()
        #expect(banner.contains("Ferry 0.1.0"), "\(banner)")
        #expect(banner.contains("server http://127.0.0.1:8080 (protocol 3.0.0)"), "\(banner)")
        #expect(banner.contains("stores in memory") && banner.contains("`help`"), "\(banner)")
        #expect(await session.prompt == "ferry(phone)> ")
        try await session.execute("offline")
        #expect(await session.prompt == "ferry(phone, offline)> ")
        try await session.execute("online")
        #expect(await session.prompt == "ferry(phone)> ")
    }

    @Test func coloursOnlyOnATerminalWithoutNoColor() {
        #expect(!Style.for(descriptor: -1, environment: [:]).isEnabled, "not a terminal")
        let painted = Style(isEnabled: true).error("error:")
        #expect(painted == "\u{1B}[31merror:\u{1B}[0m")
        #expect(Style(isEnabled: false).error("error:") == "error:")
        #expect(TextTable.displayWidth(painted) == 6)
        #expect(TextTable.displayWidth("ferry(phone, \u{1B}[33moffline\u{1B}[0m)> ") == 23)
        // NO_COLOR and TERM=dumb turn colours off even on a terminal.
        let pty = open("/dev/tty", O_RDWR)
        if pty >= 0 {
            defer { close(pty) }
            #expect(!Style.for(descriptor: pty, environment: ["NO_COLOR": "1"]).isEnabled)
            #expect(!Style.for(descriptor: pty, environment: ["TERM": "dumb"]).isEnabled)
        }
    }
}

@Suite("REPL help and completion", .timeLimit(.minutes(10)))
struct ReplHelpTests {
    @Test func helpShowsOnlyWhatWorksInTheREPL() async throws {
        let transcript = Transcript()
        let session = try ReplSession(server: nil, policy: .keep, stores: "memory", output: transcript.output)
        try await session.use("phone", store: nil)
        try await session.execute("help push")
        let help = transcript.value
        #expect(help.contains("USAGE: push [--json]"), "\(help)")
        for hidden in [
            "--store", "--server", "--protocol", "--token", "--ca-file", "--conflicts", "--version", "--help",
        ] {
            #expect(!help.contains(hidden), "\(hidden) in \(help)")
        }
        try await session.execute("help query")
        #expect(transcript.value.contains("--filter") && transcript.value.contains("-x, --expanded"))
    }

    /// `insert --help` said "unknown command 'insert'": a command's `--help` (or `-h`) is its `help`.
    @Test func aCommandsHelpFlagIsItsHelp() async throws {
        let transcript = Transcript()
        let session = try ReplSession(server: nil, policy: .keep, stores: "memory", output: transcript.output)
        try await session.use("phone", store: nil)
        for (line, expected) in [
            ("insert --help", "USAGE: insert"), ("push -h", "USAGE: push"), ("query todo --help", "--filter"),
            ("attachments add --help", "USAGE: attachments add"), ("use --help", "usage: use"),
        ] {
            let before = transcript.value.count
            try await session.execute(line)
            let printed = String(transcript.value.dropFirst(before))
            #expect(printed.contains(expected), "\(line): \(printed)")
        }
        await #expect(throws: ClientError.self) { try await session.execute("nosuch --help") }
    }

    @Test func tabCompletesOptionsToo() {
        let completion = CompletionState()
        let options = completion.candidates(for: "query todo --")
        #expect(options.contains("--filter") && options.contains("--orderby") && options.contains("--json"))
        #expect(!options.contains("--store") && !options.contains("--server"))
        #expect(completion.candidates(for: "pull todo --q").contains("--query-id"))
    }
}
