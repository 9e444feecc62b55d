import ArgumentParser
import FerryCommands
import Logging

@main
struct FerryMain {
    static func main() async {
        // Only the executable bootstraps logging; the libraries just log.
        LoggingSystem.bootstrap(StreamLogHandler.standardError)
        await FerryCommand.main()
    }
}
