import ArgumentParser
import FerryClient
import FerryConsole
import Foundation
import SyncCore

/// Draws "rows, rows/s" (with the total and the time left when the server counted them) while a push
/// or pull runs, when stderr is a terminal.
final class Progress: Sendable {
    private let task: Task<Void, Never>?
    private let output: CommandOutput?

    private init(task: Task<Void, Never>?, output: CommandOutput?) {
        self.task = task
        self.output = output
    }

    /// Draws progress on stderr while the device pulls or pushes. `operations` is how many
    /// operations a push will send, when known: then the line has a total and an estimate of the
    /// time left.
    static func watch(_ device: Device, output: CommandOutput, operations total: Int? = nil) async -> Progress {
        guard output.showsProgress else { return Progress(task: nil, output: nil) }
        let events = await device.events()
        let task = Task {
            let start = ContinuousClock.now
            var rows = 0
            var rowTotal: Int?
            var operations = 0
            var drawn = start
            for await event in events {
                switch event {
                case .pullCounted(_, _, let counted): rowTotal = counted
                case .pagePulled(_, _, let page): rows += page.received
                case .operationPushed: operations += 1
                default: continue
                }
                // At most ten lines a second: a push sends thousands of operations a second.
                let now = ContinuousClock.now
                guard now - drawn >= .milliseconds(100) else { continue }
                drawn = now
                let seconds = (now - start) / .seconds(1)
                output.writeProgress(
                    "\r\u{1B}[K"
                        + line(rows: rows, rowTotal: rowTotal, operations: operations, total: total, seconds: seconds))
            }
        }
        return Progress(task: task, output: output)
    }

    /// `1,200 rows (4,800 rows/s)`, `1,200 of 10,000 rows (4,800 rows/s, about 2 s left)`, or
    /// `120 of 500 operations (35/s, about 11 s left)`.
    static func line(rows: Int, rowTotal: Int? = nil, operations: Int, total: Int?, seconds: Double) -> String {
        let elapsed = max(0.001, seconds)
        if rows > 0 || rowTotal != nil {
            let rate = Double(rows) / elapsed
            guard let rowTotal, rowTotal >= rows else {
                return "\(Rendering.grouped(rows)) rows (\(Rendering.grouped(Int(rate))) rows/s)"
            }
            return
                "\(Rendering.grouped(rows)) of \(Rendering.grouped(rowTotal)) rows (\(Rendering.grouped(Int(rate))) rows/s"
                + timeLeft(rowTotal - rows, rate) + ")"
        }
        let rate = Double(operations) / elapsed
        guard let total, total >= operations else {
            return "\(Rendering.grouped(operations)) operations (\(Rendering.grouped(Int(rate)))/s)"
        }
        return
            "\(Rendering.grouped(operations)) of \(Rendering.grouped(total)) operations (\(Rendering.grouped(Int(rate)))/s"
            + timeLeft(total - operations, rate) + ")"
    }

    /// `, about 11 s left` (nothing while the rate is unknown).
    static func timeLeft(_ remaining: Int, _ rate: Double) -> String {
        guard rate > 0 else { return "" }
        let left = Int((Double(remaining) / rate).rounded(.up))
        return left >= 60 ? ", about \(left / 60) min \(left % 60) s left" : ", about \(left) s left"
    }

    /// Stops drawing and clears the line. It waits for the drawing task to end first: a line it
    /// drew after the clear stayed behind (after a push of 100,000 operations, whose events were
    /// still being drawn when the push returned).
    func finish() async {
        guard let task, let output else { return }
        task.cancel()
        await task.value
        output.writeProgress("\r\u{1B}[K")
    }
}
