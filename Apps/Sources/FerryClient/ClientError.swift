import Foundation
public import SyncCore
import Transport

/// A failure of a client command, as one line with a hint, and the exit code the CLI uses.
///
/// ```swift
/// throw ClientError(.usage, "'{x' is not JSON", hint: "quote the item: '{\"title\":\"Milk\"}'")
/// ```
public struct ClientError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, and the process exit code for it.
    public enum Code: Int32, Sendable, Hashable {
        /// A command failed (store, server refused, …): exit 1.
        case failed = 1
        /// Some operations failed or conflicted; they wait in the errors table: exit 2.
        case conflicts = 2
        /// The server could not be reached, or the device is offline: exit 3.
        case unreachable = 3
        /// The server refused the credentials: exit 4.
        case unauthorized = 4
        /// No such item, table, error or device: exit 5.
        case notFound = 5
        /// The command line is wrong: exit 64 (as swift-argument-parser's usage errors).
        case usage = 64
        /// The store is busy (another process holds its lock or its push lease); nothing was
        /// changed and the same command can run again: exit 75 (`EX_TEMPFAIL`).
        case busy = 75
    }

    public var code: Code
    public var message: String
    public var hint: String?
    /// Lines shown under the error, such as a filter with a caret under the bad position.
    public var detail: String?

    public init(_ code: Code, _ message: String, hint: String? = nil, detail: String? = nil) {
        self.code = code
        self.message = message
        self.hint = hint
        self.detail = detail
    }

    public var description: String {
        if let hint { return "\(message) (\(hint))" }
        return message
    }

    /// What the CLI and the REPL print: `error: <description>`, then the detail lines.
    public var report: String {
        "error: \(description)" + (detail.map { "\n" + $0 } ?? "")
    }

    /// A query error on text the user typed: the message once (no doubled "invalid query:"), a hint
    /// for double-quoted strings, and the text with a caret under the bad position.
    public static func query(_ error: QueryError, text: String?) -> ClientError {
        var hint = "see docs/query-language.md"
        if let text, text.contains("\"") { hint = "strings in filters take single quotes: title eq 'Milk'" }
        var detail: String?
        if let text, let position = error.position, position <= text.count, !text.contains("\n") {
            let shown = text.count > 200 ? String(text.prefix(200)) + "…" : text
            if position <= 200 {
                detail = "  " + shown + "\n  " + String(repeating: " ", count: position) + "^"
            }
        }
        return ClientError(.usage, error.description, hint: hint, detail: detail)
    }

    /// Any error as a ``ClientError``: engine, store, query and transport errors get their code and
    /// a hint.
    public static func from(_ error: any Error) -> ClientError {
        switch error {
        case let error as ClientError:
            return error
        case let error as SyncError:
            if error.remoteError?.underlying is AttachmentsNotOffered
                || error.remoteError?.underlying as? Connectivity.Gate == .noAttachments
            {
                // What went through before the files stays said.
                return ClientError(
                    .failed,
                    SyncError.pushedPrefix(error.operationsPushed)
                        + "the server does not offer attachments; the files stay queued",
                    hint: "start it with `ferry serve --attachments`")
            }
            switch error.code {
            case .network:
                return ClientError(.unreachable, error.message, hint: networkHint(error.remoteError))
            case .unauthorized:
                return ClientError(.unauthorized, error.message, hint: "give a valid token with --token")
            case .itemNotFound, .notFound, .attachmentNotFound:
                // The one 404 a server's answer throws: no table endpoint at that URL.
                let wrongURL = error.remoteError?.code == .notFound || error.remoteError?.code == .noEndpoint
                return ClientError(.notFound, error.message, hint: wrongURL ? "check --server" : nil)
            case .invalidQuery, .invalidItem, .invalidOperation, .invalidResolution, .invalidAttachmentName,
                .invalidTableName, .itemExists:
                return ClientError(.usage, error.message)
            case .queuedOperations:
                return ClientError(
                    .failed, error.message, hint: "push first, or purge with --force, which drops them too")
            case .pushInProgress:
                return ClientError(
                    .busy, error.message, hint: "push again when the other push is done; nothing was sent twice")
            case .store where (error.underlying as? StoreError)?.code == .busy:
                return ClientError(.busy, error.message, hint: Self.busyHint)
            case _ where error.remoteError?.status == 413 && error.message.contains("attachment"):
                // Every push failed on it again with nothing said of the way out.
                return ClientError(
                    .failed, error.message,
                    hint: "the server takes no such file: `ferry attachments rm TABLE ID NAME` takes it off the queue")
            default:
                return ClientError(.failed, error.message)
            }
        case let error as RemoteError:
            switch error.code {
            case .network: return ClientError(.unreachable, error.description, hint: networkHint(error))
            case .unauthorized: return ClientError(.unauthorized, error.description, hint: "give --token")
            case .notFound: return ClientError(.notFound, error.description)
            case .noEndpoint: return ClientError(.notFound, error.description, hint: "check --server")
            default: return ClientError(.failed, error.description)
            }
        case let error as QueryError:
            return query(error, text: nil)
        case let error as StoreError:
            return ClientError(
                error.code == .busy ? .busy : .failed, error.description,
                hint: error.code == .busy ? Self.busyHint : nil)
        case let error as CocoaError:
            // A file-system failure (a read-only directory, a missing parent): the path and the
            // system's reason, not Foundation's error dump.
            return ClientError(.failed, "cannot use '\(error.filePath ?? "?")': \(FileProblem.reason(error))")
        case let error as JSONParseError:
            return ClientError(.usage, "invalid JSON: \(error)", hint: #"write items as '{"title":"Milk"}'"#)
        default:
            let text = String(describing: error).split(whereSeparator: \.isNewline).joined(separator: " ")
            return ClientError(.failed, text)
        }
    }

    /// What to do about a store another process holds.
    static let busyHint = "another process is using this store; run the command again when it is done"

    /// What to do about a network failure: the REPL's offline switch, a missing `--server`, or the
    /// server itself.
    static func networkHint(_ error: RemoteError?) -> String {
        if error?.isUnavailable == true {
            return "the server cannot take requests for now; nothing is lost: try again later"
        }
        return switch error?.underlying as? Connectivity.Gate {
        case .offline?: "say `online` to reconnect"
        case .noServer?: "give --server URL"
        case .noAttachments?: "start the server with `ferry serve --attachments`"
        case nil:
            switch (error?.underlying as? URLError)?.code {
            case .secureConnectionFailed?: "check the URL's scheme (http or https) and --ca-file"
            case .cannotFindHost?, .dnsLookupFailed?: "check the host name in --server"
            default: "is the server running? check --server"
            }
        }
    }
}
