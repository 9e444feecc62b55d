import FerryCommands
import FerryConsole
import Foundation
import Logging

@main
struct FerryMain {
    static func main() async {
        // Only the executable bootstraps logging; the libraries just log.
        LoggingSystem.bootstrap { HoldingBackLogHandler(StreamLogHandler.standardError(label: $0)) }
        // A closed output (`ferry demo | head -1`) is an EPIPE error the commands end on quietly.
        StandardStreams.ignoreBrokenPipeSignal()
        exit(await FerryCommand.run(Array(CommandLine.arguments.dropFirst())))
    }
}
