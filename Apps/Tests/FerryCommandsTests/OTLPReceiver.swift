import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// An OTLP/HTTP trace receiver on loopback, for tests: `POST /v1/traces` with an
/// `ExportTraceServiceRequest` in binary protobuf (`application/x-protobuf`, the exporters' default
/// and what collectors take), answered with an empty `ExportTraceServiceResponse`.
///
/// The request is decoded by hand (``OTLPTraces``): swift-otel's generated OTLP types are internal
/// to it, SwiftProtobuf cannot name the fields of a message without its generated type, and the
/// few fields read here are a page of wire format. (`http/json` would need no decoder, but swift-otel
/// 1.6.0 writes it with SwiftProtobuf's JSON mapping, whose base64 ids are not OTLP/JSON's hex.)
final class OTLPReceiver: Sendable {
    let port: Int
    private let received: Received
    private let group: ServiceGroup
    private let running: Task<Void, any Error>

    /// `http://127.0.0.1:<port>`: the collector's base URL, as `--otlp-endpoint` and
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` take it.
    var url: String { "http://127.0.0.1:\(port)" }

    /// Every span received so far.
    var spans: [OTLPSpan] { received.spans.withLock { $0 } }

    /// The spans, shared with the route that receives them.
    private final class Received: Sendable {
        let spans = Mutex<[OTLPSpan]>([])
    }

    private init(port: Int, received: Received, group: ServiceGroup, running: Task<Void, any Error>) {
        self.port = port
        self.received = received
        self.group = group
        self.running = running
    }

    static func start() async throws -> OTLPReceiver {
        let received = Received()
        let router = Router()
        router.post("v1/traces") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 64 << 20)
            let decoded = try OTLPTraces.decode(Array(body.readableBytesView))
            received.spans.withLock { $0 += decoded }
            var headers = HTTPFields()
            headers[.contentType] = "application/x-protobuf"
            return Response(status: .ok, headers: headers, body: ResponseBody())
        }
        let (bound, boundContinuation) = AsyncStream<Int>.makeStream()
        var logger = Logger(label: "otlp.receiver")
        logger.logLevel = .critical
        let application = Application(
            router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in boundContinuation.yield(channel.localAddress?.port ?? 0) }, logger: logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [application], gracefulShutdownSignals: [], logger: logger))
        let running = Task { try await group.run() }
        var iterator = bound.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            running.cancel()
            throw OTLPTraces.Failure(description: "the receiver did not start")
        }
        return OTLPReceiver(port: port, received: received, group: group, running: running)
    }

    /// Waits until `done` holds for the spans received (at most `limit`), then returns them.
    func spans(within limit: Duration = .seconds(60), until done: ([OTLPSpan]) -> Bool) async -> [OTLPSpan] {
        let deadline = ContinuousClock.now + limit
        while !done(spans), ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        return spans
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        _ = await running.result
    }
}

/// One span as OTLP carries it, with the `service.name` of its resource.
struct OTLPSpan: Sendable, CustomStringConvertible {
    /// Lowercase hex, as in `traceparent`.
    var traceID = ""
    var spanID = ""
    /// Empty for a root span.
    var parentSpanID = ""
    var name = ""
    /// OTLP's `SpanKind`: 1 internal, 2 server, 3 client.
    var kind = 0
    /// String, integer and boolean attributes, as text.
    var attributes: [String: String] = [:]
    /// OTLP's `Status.code`: 0 unset, 1 ok, 2 error.
    var statusCode = 0
    var service = ""

    var description: String { "\(service) \(name) \(spanID) parent \(parentSpanID.isEmpty ? "-" : parentSpanID)" }
}

/// The few fields of `opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest` the tests read,
/// decoded from the protobuf wire format (field numbers from opentelemetry-proto's `trace.proto`,
/// `common.proto` and `resource.proto`).
enum OTLPTraces {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// One field: its number and its value (a varint, a fixed 64- or 32-bit value, or bytes).
    enum Value {
        case varint(UInt64)
        case fixed(UInt64)
        case bytes(ArraySlice<UInt8>)
    }

    /// The fields of one message, in order.
    static func fields(_ bytes: ArraySlice<UInt8>) throws -> [(Int, Value)] {
        var fields: [(Int, Value)] = []
        var index = bytes.startIndex
        func varint() throws -> UInt64 {
            var result: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                guard index < bytes.endIndex, shift < 64 else { throw Failure(description: "a truncated varint") }
                let byte = bytes[index]
                index += 1
                result |= UInt64(byte & 0x7f) << shift
                if byte & 0x80 == 0 { return result }
                shift += 7
            }
        }
        func fixed(_ count: Int) throws -> UInt64 {
            guard bytes.endIndex - index >= count else { throw Failure(description: "a truncated fixed value") }
            var result: UInt64 = 0
            for offset in 0..<count { result |= UInt64(bytes[index + offset]) << (8 * UInt64(offset)) }
            index += count
            return result
        }
        while index < bytes.endIndex {
            let key = try varint()
            let number = Int(key >> 3)
            switch key & 7 {
            case 0: fields.append((number, .varint(try varint())))
            case 1: fields.append((number, .fixed(try fixed(8))))
            case 5: fields.append((number, .fixed(try fixed(4))))
            case 2:
                let length = Int(try varint())
                guard length >= 0, bytes.endIndex - index >= length else {
                    throw Failure(description: "a truncated length-delimited field")
                }
                fields.append((number, .bytes(bytes[index..<(index + length)])))
                index += length
            default: throw Failure(description: "wire type \(key & 7) (groups are not used by OTLP)")
            }
        }
        return fields
    }

    static func decode(_ request: [UInt8]) throws -> [OTLPSpan] {
        var spans: [OTLPSpan] = []
        for case (1, .bytes(let resourceSpans)) in try fields(request[...]) {
            var service = ""
            var scopes: [ArraySlice<UInt8>] = []
            for field in try fields(resourceSpans) {
                switch field {
                case (1, .bytes(let resource)):
                    for case (1, .bytes(let attribute)) in try fields(resource) {
                        let (key, value) = try keyValue(attribute)
                        if key == "service.name" { service = value }
                    }
                case (2, .bytes(let scope)): scopes.append(scope)
                default: break
                }
            }
            for scope in scopes {
                for case (2, .bytes(let span)) in try fields(scope) {
                    var decoded = try self.span(span)
                    decoded.service = service
                    spans.append(decoded)
                }
            }
        }
        return spans
    }

    static func span(_ bytes: ArraySlice<UInt8>) throws -> OTLPSpan {
        var span = OTLPSpan()
        for field in try fields(bytes) {
            switch field {
            case (1, .bytes(let id)): span.traceID = hex(id)
            case (2, .bytes(let id)): span.spanID = hex(id)
            case (4, .bytes(let id)): span.parentSpanID = hex(id)
            case (5, .bytes(let name)): span.name = String(decoding: name, as: UTF8.self)
            case (6, .varint(let kind)): span.kind = Int(kind)
            case (9, .bytes(let attribute)):
                let (key, value) = try keyValue(attribute)
                span.attributes[key] = value
            case (15, .bytes(let status)):
                for case (3, .varint(let code)) in try fields(status) { span.statusCode = Int(code) }
            default: break
            }
        }
        return span
    }

    /// A `KeyValue` whose `AnyValue` is a string, a boolean or an integer, as text.
    static func keyValue(_ bytes: ArraySlice<UInt8>) throws -> (String, String) {
        var key = ""
        var value = ""
        for field in try fields(bytes) {
            switch field {
            case (1, .bytes(let text)): key = String(decoding: text, as: UTF8.self)
            case (2, .bytes(let any)):
                for inner in try fields(any) {
                    switch inner {
                    case (1, .bytes(let text)): value = String(decoding: text, as: UTF8.self)
                    case (2, .varint(let flag)): value = flag == 0 ? "false" : "true"
                    case (3, .varint(let number)): value = String(Int64(bitPattern: number))
                    default: break
                    }
                }
            default: break
            }
        }
        return (key, value)
    }

    static func hex(_ bytes: ArraySlice<UInt8>) -> String {
        bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }
}
