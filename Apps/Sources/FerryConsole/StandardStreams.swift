#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif
import Synchronization

/// Writing to standard output and standard error so that a reader that goes away (`ferry demo |
/// head -1`) ends the command quietly: the registered clean-ups run (temporary directories, open
/// stores), then the process exits with 141, as a shell reports a process killed by `SIGPIPE`. No
/// backtrace, nothing left behind.
///
/// ```swift
/// StandardStreams.ignoreBrokenPipeSignal()          // once, in `main`
/// let cleanup = StandardStreams.addCleanup { removeTemporaryDirectory() }
/// defer { StandardStreams.removeCleanup(cleanup) }
/// StandardStreams.write("hello\n")
/// ```
public enum StandardStreams: Sendable {
    /// The exit status after a closed output: 128 + SIGPIPE, what shells show for a broken pipe.
    public static let brokenPipeStatus: Int32 = 141

    private struct Cleanups {
        var next = 0
        var actions: [Int: @Sendable () -> Void] = [:]
    }

    private static let cleanups = Mutex(Cleanups())

    /// Makes writes to a closed pipe fail with `EPIPE` instead of killing the process, so the
    /// clean-ups can run. The executable calls it once at start.
    public static func ignoreBrokenPipeSignal() {
        signal(SIGPIPE, SIG_IGN)
    }

    /// Registers work to do before the process exits on a closed output; returns its key.
    public static func addCleanup(_ action: @escaping @Sendable () -> Void) -> Int {
        cleanups.withLock { state in
            let key = state.next
            state.next += 1
            state.actions[key] = action
            return key
        }
    }

    /// Forgets a clean-up once its work is done normally.
    public static func removeCleanup(_ key: Int) {
        _ = cleanups.withLock { $0.actions.removeValue(forKey: key) }
    }

    /// Writes all of `text` to standard output.
    public static func write(_ text: String) { write(text, to: 1) }

    /// Writes all of `text` to standard error.
    public static func writeError(_ text: String) { write(text, to: 2) }

    /// Writes all of `text` to `descriptor`, retrying short writes and interruptions. When the
    /// reader is gone (`EPIPE`), runs the clean-ups and exits with ``brokenPipeStatus``; other
    /// errors (a full disk behind a redirection) drop the text, as `print` does.
    public static func write(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { bytes in
            guard var pointer = bytes.baseAddress else { return }
            var remaining = bytes.count
            while remaining > 0 {
                let written = systemWrite(descriptor, pointer, remaining)
                if written > 0 {
                    pointer += written
                    remaining -= written
                } else if written < 0 && errno == EINTR {
                    continue
                } else if written < 0 && errno == EPIPE {
                    exitAfterBrokenPipe()
                } else {
                    return
                }
            }
        }
    }

    /// Runs the clean-ups and exits with ``brokenPipeStatus``.
    public static func exitAfterBrokenPipe() -> Never {
        let actions = cleanups.withLock { state in
            defer { state.actions = [:] }
            return state.actions.sorted { $0.key > $1.key }.map(\.value)
        }
        for action in actions { action() }
        exit(brokenPipeStatus)
    }

    private static func systemWrite(_ descriptor: Int32, _ pointer: UnsafePointer<UInt8>, _ count: Int) -> Int {
        #if canImport(Glibc)
            Glibc.write(descriptor, pointer, count)
        #elseif canImport(Musl)
            Musl.write(descriptor, pointer, count)
        #else
            Darwin.write(descriptor, pointer, count)
        #endif
    }
}
