import Foundation
import ServerStorageCore
import SyncCore

// Before a request reaches its table: the protocol version, the `X-ZUMO-Options`, the table it names and the
// caller's identity.
extension TableService {

    /// `ZUMO-API-VERSION` from the query (any case; it wins) or the header: 2.0.x is 2.0.0, 3.0.x or
    /// absent is 3.0.0, anything else is a 400.
    static func protocolVersion(_ request: TableRequest) throws -> ProtocolVersion {
        // Most requests have no query (a batch's writes): nothing to parse then.
        let fromQuery =
            request.rawQuery.isEmpty
            ? nil : ODataParameters(parsing: request.rawQuery).value(for: "zumo-api-version")
        guard let value = fromQuery ?? request.headers["zumo-api-version"] else { return .v3 }
        // The versions clients send, without splitting them into Characters (2% of a batch's time).
        if value == "3.0.0" { return .v3 }
        if value == "2.0.0" { return .v2 }
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 2 || parts.count == 3, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCIIDigit) }) {
            if parts[0] == "2" && parts[1] == "0" { return .v2 }
            if parts[0] == "3" && parts[1] == "0" { return .v3 }
        }
        throw ProtocolError.badRequest(
            "unsupported ZUMO-API-VERSION '\(value.prefix(40))': this server speaks 2.0.0 and 3.0.0",
            code: "unsupportedVersion")
    }

    static func zumoOptions(_ request: TableRequest) -> [String] {
        request.headers.values("x-zumo-options").flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
    }

    /// The table a request names, whatever the case of its letters, as on the protocol's other
    /// servers (ASP.NET's and Express's routes ignore it; so do SQL Server's names): the 2.0 .NET
    /// client asks for `TodoItem` where the 3.0 one asks for `todoitem`, and both mean one table,
    /// with its rules. A name that matches a table exactly is that table; otherwise the declared or
    /// stored table that differs only in case (``DynamicTables/storedName(matching:storage:)``).
    func resolve(_ name: String, creating: Bool) async throws -> TableSettings {
        if let table = declaredTable(name) { return table }
        guard configuration.allowsDynamicTables else { throw ProtocolError.notFound("no table '\(name.prefix(128))'") }
        do {
            try StoreValidation.validateTableName(name)
        } catch {
            throw ProtocolError(404, "invalidTableName", error.message)
        }
        var table = configuration.dynamicTableDefaults
        table.name = try await dynamicTables.storedName(matching: name, storage: storage) ?? name
        if !creating {
            guard try await storage.tableExists(table.name) else { throw ProtocolError.notFound("no table '\(name)'") }
        }
        return table
    }

    /// The declared table `name` names, exactly or but for its case.
    func declaredTable(_ name: String) -> TableSettings? {
        declared[name] ?? declaredIgnoringCase[name.lowercased()]
    }

    /// The name of the table `name` means: itself, or the declared or stored table that differs
    /// from it only in case (see ``resolve(_:creating:)``).
    func tableName(_ name: String) async throws -> String {
        if let table = declaredTable(name) { return table.name }
        guard configuration.allowsDynamicTables else { return name }
        return try await dynamicTables.storedName(matching: name, storage: storage) ?? name
    }

    /// The token's identity; an invalid token answers the table's unauthorized status (401 unless
    /// configured otherwise), whether or not the table requires one.
    ///
    /// A request carries one credential: `X-ZUMO-AUTH` and `Authorization: Bearer` naming two
    /// different tokens is 400 (RFC 6750 §2: one method per request), not one of them picked.
    func authenticate(_ request: TableRequest, table: TableSettings) throws -> TokenVerifier.Identity? {
        func given(_ text: String?) -> String? {
            guard let text = text?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
            return text
        }
        let zumo = given(request.headers["x-zumo-auth"])
        var bearer: String?
        if let authorization = request.headers["authorization"] {
            let parts = authorization.split(separator: " ", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "bearer" { bearer = given(String(parts[1])) }
        }
        if let zumo, let bearer, zumo != bearer {
            throw ProtocolError(
                400, "twoCredentials", "X-ZUMO-AUTH and Authorization: Bearer carry different tokens; send one")
        }
        guard let token = zumo ?? bearer, let verifier else { return nil }
        do {
            return try verifier.verify(token)
        } catch {
            throw ProtocolError(table.unauthorizedStatus, "unauthorized", error.description)
        }
    }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
