import PostgresNIO
import SyncCore
public import ServerStorageCore
@_spi(StoreSupport) import SyncCore

/// Set writes: many inserts, claims or recordings in a few statements whatever their number, each
/// with the outcome it would have alone.
extension PostgreSQLServerStorage {
    /// Checks each row as ``insert(into:id:content:owner:)`` does (id, owner, JSON, the field kinds
    /// already known), then in one transaction (a savepoint of the current one): reads the kinds and
    /// the ids the rows need, decides each row's outcome in order, fixes the new kinds, and inserts
    /// every row that goes in with one statement that reserves their stamps with one update of the
    /// table's sequence row and notifies once.
    ///
    /// The decisions rest on what the transaction read; another instance may fix a kind or insert
    /// an id between that read and the writes. Then the set fails with `busy` (nothing kept; the
    /// server answers 503 and the client retries) rather than give a row a wrong outcome.
    public func insert(into table: StorageTable, _ rows: [StorageInsert]) async throws
        -> [Result<StoredItem, StorageError>]
    {
        if rows.isEmpty { return [] }
        var unknown: [[(String, FieldKind)]] = Array(repeating: [], count: rows.count)
        let checks = CheckedInserts(rows, into: table) { row, index in
            try Self.validateID(row.id)
            if let owner = row.owner { try OwnerScope.validateSubject(owner) }
            let text = try Self.itemText(row.content, table.name)
            unknown[index] = try unknownKinds(table, row.content)
            return text
        }
        if let settled = checks.settled { return settled }
        let (checked, texts) = (checks.checked, checks.texts)
        guard let number = try await tableNumber(table.name, creating: true) else {
            throw StorageError.noSuchTable(table.name)
        }
        let plan = SetInsert(
            table: table, sqlName: Self.sqlName(number), rows: rows, texts: texts, unknown: unknown, checked: checked)
        let (results, fixed) = try await withTransaction("inserting into '\(table.name)'") { connection in
            try await self.run(plan, on: connection)
        }
        remember(table.name, fixed)
        return results
    }

    /// A set insert checked before the database.
    struct SetInsert: Sendable {
        var table: StorageTable
        var sqlName: String
        var rows: [StorageInsert]
        var texts: [String]
        /// The undeclared fields of each row whose kind the cache does not know, sorted by name.
        var unknown: [[(String, FieldKind)]]
        /// The outcome of each row that failed its checks.
        var checked: [Result<StoredItem, StorageError>?]
    }

    private func run(_ plan: SetInsert, on connection: PostgreSQLSession) async throws
        -> (results: [Result<StoredItem, StorageError>], fixed: [(String, FieldKind)])
    {
        let table = plan.table.name
        var results = plan.checked
        let pending = plan.rows.indices.filter { results[$0] == nil }
        var known = try await Self.fieldKinds(
            of: table, Set(pending.flatMap { plan.unknown[$0].map(\.0) }).sorted(), on: connection)
        // Ids by their bytes (ItemID.Key), as PostgreSQL compares them: with `String`s, "café"
        // decomposed was taken for "café" composed and refused as a conflict.
        var taken: Set<ItemID.Key> = []
        do {
            var binds = PostgresBindings(capacity: 1)
            binds.append(Set(pending.map { ItemID.Key(plan.rows[$0].id) }).map(\.id))
            let select = PostgresQuery(
                unsafeSQL: "SELECT id FROM \(plan.sqlName) WHERE id = ANY($1::text[])", binds: binds)
            for row in try await connection.rows(select) { taken.insert(ItemID.Key(try row.decode(String.self))) }
        }
        // Each row in order, as alone: its kinds first (a wrong kind fails before the id is looked
        // at), then its id; a row that goes in fixes its new kinds for the rows after it.
        var fixed: [(String, FieldKind)] = []
        var going: [Int] = []
        var conflicting: [Int] = []
        rows: for index in pending {
            var new: [(String, FieldKind)] = []
            for (name, kind) in plan.unknown[index] {
                if let existing = known[name] {
                    guard existing == kind else {
                        results[index] = .failure(Self.kindError(table, name, existing, kind))
                        continue rows
                    }
                } else {
                    new.append((name, kind))
                }
            }
            guard taken.insert(ItemID.Key(plan.rows[index].id)).inserted else {
                conflicting.append(index)
                continue
            }
            for (name, kind) in new {
                known[name] = kind
                fixed.append((name, kind))
            }
            going.append(index)
        }
        if !fixed.isEmpty {
            let inserted = try await Self.recordKinds(of: table, fixed, on: connection)
            // Another writer fixed some of them meanwhile (its insert held this one until it
            // committed, so they are visible now). The same kinds make no row's outcome different:
            // the rows go in as decided. Writers of a new table's first rows all fix the same kinds;
            // failing them all but one as busy made them retry, one commit each (4-10x slower).
            let others = fixed.filter { !inserted.contains($0.0) }
            if !others.isEmpty {
                let theirs = try await Self.fieldKinds(of: table, others.map(\.0), on: connection)
                // A different kind would change outcomes decided above: the set is tried again.
                guard others.allSatisfy({ theirs[$0.0] == $0.1 }) else {
                    throw StorageError(
                        .busy, "the field kinds of '\(table)' were fixed otherwise by another writer meanwhile; retry")
                }
            }
        }
        if !going.isEmpty {
            let stamps = try await insertRows(plan, going, on: connection)
            for (offset, index) in going.enumerated() {
                let row = plan.rows[index]
                let at = Timestamp(millisecondsSince1970: stamps.firstUpdatedAt + Int64(offset))
                results[index] = .success(
                    StoredItem(
                        id: row.id, content: row.content, createdAt: at, updatedAt: at,
                        version: stamps.firstVersion + Int64(offset), deleted: false, owner: row.owner))
            }
        }
        if !conflicting.isEmpty {
            var binds = PostgresBindings(capacity: 1)
            binds.append(Array(Set(conflicting.map { plan.rows[$0].id })))
            let select = PostgresQuery(
                unsafeSQL: "SELECT \(Self.columns) FROM \(plan.sqlName) WHERE id = ANY($1::text[])", binds: binds)
            var current: [String: StoredItem] = [:]
            for row in try await connection.rows(select) {
                let item = try Self.decode(row)
                current[item.id] = item
            }
            for index in conflicting {
                let id = plan.rows[index].id
                results[index] = .failure(.alreadyExists(id: id, in: table, current: current[id]))
            }
        }
        return (results.map { $0! }, fixed)
    }

    /// Records the kinds of `fields` of `table` not recorded yet, in one statement; answers the
    /// fields it recorded (another writer's recording of the others held this one until it
    /// committed).
    static func recordKinds(of table: String, _ fields: [(String, FieldKind)], on connection: PostgreSQLSession)
        async throws -> Set<String>
    {
        var binds = PostgresBindings(capacity: 3)
        binds.append(table)
        binds.append(fields.map(\.0))
        binds.append(fields.map(\.1.rawValue))
        let insert = PostgresQuery(
            unsafeSQL: """
                INSERT INTO ferry_fields (table_name, field, kind)
                SELECT $1, field, kind FROM unnest($2::text[], $3::text[]) AS fixed(field, kind)
                ON CONFLICT (table_name, field) DO NOTHING RETURNING field
                """, binds: binds)
        var inserted: Set<String> = []
        for row in try await connection.rows(insert) { inserted.insert(try row.decode(String.self)) }
        return inserted
    }

    /// The kinds fixed for `fields` of `table`, as this connection sees them now.
    static func fieldKinds(of table: String, _ fields: [String], on connection: PostgreSQLSession)
        async throws -> [String: FieldKind]
    {
        var kinds: [String: FieldKind] = [:]
        if fields.isEmpty { return kinds }
        var binds = PostgresBindings(capacity: 2)
        binds.append(table)
        binds.append(fields)
        let select = PostgresQuery(
            unsafeSQL: "SELECT field, kind FROM ferry_fields WHERE table_name = $1 AND field = ANY($2::text[])",
            binds: binds)
        for row in try await connection.rows(select) {
            let (field, kind) = try row.decode((String, String).self)
            if let kind = FieldKind(rawValue: kind) { kinds[field] = kind }
        }
        return kinds
    }

    /// Inserts the rows `going` with one statement: `k` stamps reserved with one update of the
    /// table's sequence row (`updatedAt` from `max(now, last + 1)` on, consecutive versions), one
    /// notification. Answers the first row's stamps.
    private func insertRows(_ plan: SetInsert, _ going: [Int], on connection: PostgreSQLSession) async throws
        -> (firstUpdatedAt: Int64, firstVersion: Int64)
    {
        let count = Int64(going.count)
        var binds = PostgresBindings(capacity: 7)
        binds.append(going.map { plan.rows[$0].id })
        binds.append(going.map { plan.texts[$0] })
        // Owners are never empty (validated), so "" stands for none.
        binds.append(going.map { plan.rows[$0].owner ?? "" })
        binds.append(configuration.now())
        binds.append(count)
        binds.append(plan.table.name)
        binds.append(channel)
        let statement = PostgresQuery(
            unsafeSQL: """
                WITH stamp AS (
                    UPDATE ferry_tables
                    SET last_updated_at = GREATEST($4::bigint, last_updated_at + 1) + $5::bigint - 1,
                        last_version = last_version + $5::bigint
                    WHERE name = $6::text
                    RETURNING last_updated_at, last_version
                ), inserted AS (
                    INSERT INTO \(plan.sqlName) (id, item, created_at, updated_at, version, deleted, owner)
                    SELECT input.id, input.item::jsonb, stamp.last_updated_at - $5::bigint + input.n,
                        stamp.last_updated_at - $5::bigint + input.n, stamp.last_version - $5::bigint + input.n, FALSE,
                        NULLIF(input.owner, '')
                    FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS input(id, item, owner, n), stamp
                    ORDER BY input.n
                    ON CONFLICT (id) DO NOTHING
                    RETURNING 1
                ), notified AS (
                    SELECT pg_notify($7::text, last_version || ' ' || last_updated_at || ' ' || $6::text) FROM stamp
                )
                SELECT last_updated_at, last_version, (SELECT count(*) FROM inserted), (SELECT count(*) FROM notified)
                FROM stamp
                """, binds: binds)
        guard let row = try await connection.rows(statement).first else {
            throw StorageError.noSuchTable(plan.table.name)
        }
        let (lastUpdatedAt, lastVersion, inserted, _) = try row.decode((Int64, Int64, Int64, Int64).self)
        guard inserted == count else {
            // An id this transaction found free was inserted by another writer meanwhile.
            throw StorageError(
                .busy, "another writer inserted one of these ids into '\(plan.table.name)' meanwhile; retry the inserts"
            )
        }
        return (lastUpdatedAt - count + 1, lastVersion - count + 1)
    }

    /// One statement claims every free key (placeholder rows, status 0, in key order), a second
    /// reads the outcomes of the others once their transactions ended.
    public func claimOutcomes(scope: String, keys: [String]) async throws -> [String: RecordedOutcome] {
        let keys = Set(keys).sorted()
        if keys.isEmpty { return [:] }
        for key in keys { try RecordedOutcome.validateKey(key) }
        let now = configuration.now()
        let inTransaction = currentTransaction != nil
        return try await withConnection("claiming idempotency keys") { connection in
            var unclaimed = keys
            if inTransaction {
                var binds = PostgresBindings(capacity: 3)
                binds.append(scope)
                binds.append(keys)
                binds.append(now)
                let claim = PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO ferry_outcomes (scope, key, fingerprint, status, headers, body, recorded_at)
                        SELECT $1, claim.key, '', 0, '{}', NULL, $3
                        FROM unnest($2::text[]) WITH ORDINALITY AS claim(key, n) ORDER BY claim.n
                        ON CONFLICT (scope, key) DO NOTHING RETURNING key
                        """, binds: binds)
                let claimed = Set(try await connection.rows(claim).map { try $0.decode(String.self) })
                unclaimed = keys.filter { !claimed.contains($0) }
            }
            return try await Self.fetchOutcomes(connection, scope: scope, keys: unclaimed)
        }
    }

    static func fetchOutcomes(_ connection: PostgreSQLSession, scope: String, keys: [String]) async throws
        -> [String: RecordedOutcome]
    {
        if keys.isEmpty { return [:] }
        var binds = PostgresBindings(capacity: 2)
        binds.append(scope)
        binds.append(keys)
        let select = PostgresQuery(
            unsafeSQL: """
                SELECT key, fingerprint, status, headers, body, recorded_at FROM ferry_outcomes
                WHERE scope = $1 AND key = ANY($2::text[])
                """, binds: binds)
        var recorded: [String: RecordedOutcome] = [:]
        for row in try await connection.rows(select) {
            let (key, fingerprint, status, headers, body, recordedAt) = try row.decode(
                (String, String, Int64, String, String?, Int64).self)
            recorded[key] = RecordedOutcome(
                scope: scope, key: key, fingerprint: fingerprint, status: Int(status),
                headers: RecordedOutcome.headers(fromText: headers), body: body, recordedAt: recordedAt)
        }
        return recorded
    }

    /// One statement fills this transaction's claims (or records new keys); the outcomes others
    /// recorded first are read back.
    public func recordOutcomes(_ outcomes: [RecordedOutcome]) async throws -> [RecordedOutcome] {
        if outcomes.isEmpty { return [] }
        for outcome in outcomes { try RecordedOutcome.validateKey(outcome.key) }
        struct Place: Hashable {
            var scope: String
            var key: String
        }
        // A statement may not write a row twice: the first outcome of a key goes in, and the
        // others get what is kept.
        var seen: Set<Place> = []
        let first = outcomes.filter { seen.insert(Place(scope: $0.scope, key: $0.key)).inserted }
        var binds = PostgresBindings(capacity: 8)
        binds.append(first.map(\.scope))
        binds.append(first.map(\.key))
        binds.append(first.map(\.fingerprint))
        binds.append(first.map { Int64($0.status) })
        binds.append(first.map(\.headersText))
        binds.append(first.map { $0.body ?? "" })
        binds.append(first.map { $0.body != nil })
        binds.append(first.map(\.recordedAt))
        let insert = PostgresQuery(
            unsafeSQL: """
                INSERT INTO ferry_outcomes (scope, key, fingerprint, status, headers, body, recorded_at)
                SELECT o.scope, o.key, o.fingerprint, o.status, o.headers, CASE WHEN o.has_body THEN o.body END,
                    o.recorded_at
                FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::boolean[],
                    $8::bigint[]) WITH ORDINALITY AS o(scope, key, fingerprint, status, headers, body, has_body, recorded_at, n)
                ORDER BY o.n
                ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
                    headers = EXCLUDED.headers, body = EXCLUDED.body, recorded_at = EXCLUDED.recorded_at
                WHERE ferry_outcomes.status = 0
                RETURNING scope, key
                """, binds: binds)
        return try await withTransaction("recording outcomes") { connection in
            var written: Set<Place> = []
            for row in try await connection.rows(insert) {
                let (scope, key) = try row.decode((String, String).self)
                written.insert(Place(scope: scope, key: key))
            }
            // The outcomes recorded before this statement (a separate one: it sees those commits).
            var kept: [Place: RecordedOutcome] = [:]
            var byScope: [String: [String]] = [:]
            for outcome in first where !written.contains(Place(scope: outcome.scope, key: outcome.key)) {
                byScope[outcome.scope, default: []].append(outcome.key)
            }
            for (scope, keys) in byScope {
                for (key, outcome) in try await Self.fetchOutcomes(connection, scope: scope, keys: keys) {
                    kept[Place(scope: scope, key: key)] = outcome
                }
            }
            var firsts: [Place: RecordedOutcome] = [:]
            for outcome in first { firsts[Place(scope: outcome.scope, key: outcome.key)] = outcome }
            return outcomes.map { outcome in
                let place = Place(scope: outcome.scope, key: outcome.key)
                if let earlier = kept[place] { return earlier }
                return firsts[place] ?? outcome
            }
        }
    }
}
