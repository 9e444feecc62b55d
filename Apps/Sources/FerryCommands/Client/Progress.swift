import ArgumentParser
import FerryClient
import FerryConsole
import Foundation
import SyncCore

/// Draws "rows, rows/s" (with the total and the time left when the server counted them) while a push
/// or pull runs, and the bytes of attachment transfers, when stderr is a terminal or `--progress`
/// asks for it.
final class Progress: Sendable {
    private let task: Task<Void, Never>?
    private let output: CommandOutput?
    /// Whether the line is drawn over itself (stderr is a terminal), and cleared at the end.
    private let terminal: Bool

    private init(task: Task<Void, Never>?, output: CommandOutput?, terminal: Bool = false) {
        self.task = task
        self.output = output
        self.terminal = terminal
    }

    /// Draws progress on stderr while the device pulls or pushes. `operations` is how many
    /// operations a push will send, when known: then the line has a total and an estimate of the
    /// time left. Attachment transfers draw their own line (`uploading 'scan.pdf': 12.0 of 40.0 MB`).
    ///
    /// On a terminal the line is drawn over itself and cleared at the end; asked for elsewhere
    /// (`--progress` into a file or a pipe), a line is written at most every second, and one per
    /// finished transfer.
    static func watch(_ device: Device, output: CommandOutput, operations total: Int? = nil) async -> Progress {
        guard output.showsProgress else { return Progress(task: nil, output: nil) }
        let terminal = output.drawsProgressInPlace
        let events = await device.events()
        let task = Task {
            let start = ContinuousClock.now
            var rows = 0
            var rowTotal: Int?
            var operations = 0
            var drawn = start
            /// The file moving: when its first progress came and how many bytes it said then (a
            /// resumed upload starts at the bytes the server had: they moved before this run), and now.
            var transfer:
                (
                    moving: AttachmentTransfer, start: ContinuousClock.Instant, first: Int64, bytes: Int64,
                    total: Int64
                )?
            for await event in events {
                switch event {
                case .pullCounted(_, _, let counted): rowTotal = counted
                case .pagePulled(_, _, let page): rows += page.received
                case .operationPushed: operations += 1
                case .attachmentProgress(let moving, let bytes, let total):
                    if transfer?.moving != moving { transfer = (moving, ContinuousClock.now, bytes, 0, 0) }
                    transfer?.bytes = bytes
                    transfer?.total = total
                case .attachmentTransferred(let moved):
                    transfer = nil
                    if !terminal, moved.direction != .delete {
                        output.writeProgress(
                            "\(moved.direction == .upload ? "uploaded" : "downloaded") '\(moved.name)'\n")
                    }
                    continue
                default: continue
                }
                // At most ten lines a second on a terminal (a push sends thousands of operations a
                // second), one a second elsewhere.
                let now = ContinuousClock.now
                guard now - drawn >= (terminal ? .milliseconds(100) : .seconds(1)) else { continue }
                drawn = now
                let text =
                    if let transfer {
                        attachmentLine(
                            transfer.moving, bytes: transfer.bytes, total: transfer.total,
                            moved: transfer.bytes - transfer.first, seconds: (now - transfer.start) / .seconds(1))
                    } else {
                        line(
                            rows: rows, rowTotal: rowTotal, operations: operations, total: total,
                            seconds: (now - start) / .seconds(1))
                    }
                output.writeProgress(terminal ? "\r\u{1B}[K" + text : text + "\n")
            }
        }
        return Progress(task: task, output: output, terminal: terminal)
    }

    /// `uploading 'scan.pdf': 12.0 of 40.0 MB (8.1 MB/s, about 4 s left)`: the rate of the `moved`
    /// bytes of the last `seconds` (not of those a resumed upload found on the server, which made a
    /// resumed 40 MB upload "20.2 MB of 40.0 MB (20.19 GB/s)"), once there is half a second of it.
    static func attachmentLine(
        _ transfer: AttachmentTransfer, bytes: Int64, total: Int64, moved: Int64, seconds: Double
    ) -> String {
        let verb = transfer.direction == .download ? "downloading" : "uploading"
        let rate = Double(moved) / max(0.001, seconds)
        let rateText = seconds >= 0.5 && moved > 0 ? " (\(Device.bytes(Int64(rate)))/s" : ""
        guard total > 0, total >= bytes else {
            return "\(verb) '\(transfer.name)': \(Device.bytes(bytes))" + (rateText.isEmpty ? "" : rateText + ")")
        }
        let left = rateText.isEmpty ? "" : timeLeft(Int(total - bytes), rate)
        return "\(verb) '\(transfer.name)': \(Device.bytes(bytes)) of \(Device.bytes(total))"
            + (rateText.isEmpty ? "" : rateText + left + ")")
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
        if terminal { output.writeProgress("\r\u{1B}[K") }
    }
}
