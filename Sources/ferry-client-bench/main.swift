// ferry-client-bench: FerryClient's local costs beside bare SQLite, in one run
// (bench/client.sh drives it against a release `ferry serve`). Prints `name value` lines
// and the ratios against the goals of issue 13:
//
//   enqueue     FerryClient.enqueue (local row + outbox row + counter, one transaction)
//               against a bare prepared INSERT of the same row in one transaction, both
//               WAL with synchronous=NORMAL: ops/s, goal bare-relative >= 0.5
//   first load  LocalStore.merge of a real first load's pages (10,000 rows of tasks, as
//               GET /v1/pull answered them) into an empty store, against a bare bulk
//               INSERT of the same rows in one transaction: rows/s, goal >= 0.5. Reported
//               with and without parsing the answers' JSON (the bare insert parses none).
//   cue -> store  a second device of the same user holds FerryClient's cue stream; the first
//               pushes a row (a bare POST /v1/push): from the push's answer to the second
//               device's store holding the row (its observer fired), against one bare
//               GET /v1/pull round trip for the same change, in the same round: p50, goal
//               at most 5 ms more.
//
// Rounds are interleaved (FerryClient, bare, FerryClient, ...) and the medians compared.

import CSQLite
import FerryClient
import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

func argument(_ name: String, _ fallback: String) -> String {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return fallback }
    return arguments[index + 1]
}

let server = URL(string: argument("--server", "http://127.0.0.1:8080"))!
let rounds = Int(argument("--rounds", "5"))!
let enqueues = Int(argument("--enqueues", "2000"))!
let loadRows = Int(argument("--rows", "10000"))!
let cueRounds = Int(argument("--cues", "40"))!
let scratch = URL(fileURLWithPath: argument("--dir", NSTemporaryDirectory()))
    .appendingPathComponent("ferry-client-bench-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: scratch) }

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

/// A bare SQLite file in WAL mode with synchronous=NORMAL, as FerryClient opens its store.
final class BareDatabase {
    let handle: OpaquePointer
    init(_ path: String) {
        var opened: OpaquePointer?
        sqlite3_open(path, &opened)
        handle = opened!
        exec("pragma journal_mode = wal; pragma synchronous = normal")
    }
    deinit { sqlite3_close(handle) }
    func exec(_ sql: String) { sqlite3_exec(handle, sql, nil, nil, nil) }
    func prepare(_ sql: String) -> OpaquePointer {
        var statement: OpaquePointer?
        sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
        return statement!
    }
}

let bareTable = """
    create table tasks (id text, user_id text, parent_id text, title text, position real, metadata text,
    updated_at text, primary key (user_id, id))
    """

func bindText(_ statement: OpaquePointer, _ index: Int32, _ text: String?) {
    if let text {
        sqlite3_bind_text(statement, index, text, -1, csqlite_transient())
    } else {
        sqlite3_bind_null(statement, index)
    }
}

func row(_ index: Int, round: Int) -> FerryRow {
    [
        "id": .string("t-\(round)-\(index)"), "parent_id": "root", "title": .string("task number \(index)"),
        "position": .double(Double(index)), "metadata": ["due_at": "2026-05-01T09:30:00Z"],
    ]
}

// MARK: - enqueue

var configuration = FerryClient.Configuration()
configuration.syncsAutomatically = false
configuration.log = { _ in }
let writer = try await FerryClient(
    server: server, stateDirectory: scratch.appendingPathComponent("writer"), configuration: configuration)
let userID = writer.user!.id

var clientRates: [Double] = []
var bareRates: [Double] = []
for round in 0..<rounds {
    let started = now()
    for index in 0..<enqueues { try writer.enqueue(.upsert, into: "tasks", row(index, round: round)) }
    clientRates.append(Double(enqueues) / (now() - started))

    let bare = BareDatabase(scratch.appendingPathComponent("bare-\(round).sqlite").path)
    bare.exec(bareTable)
    let insert = bare.prepare(
        "insert into tasks (id, user_id, parent_id, title, position, metadata) values (?1, ?2, ?3, ?4, ?5, ?6)")
    let bareStarted = now()
    for index in 0..<enqueues {
        let values = row(index, round: round)
        bare.exec("begin immediate")
        bindText(insert, 1, values["id"]?.stringValue)
        bindText(insert, 2, userID)
        bindText(insert, 3, "root")
        bindText(insert, 4, values["title"]?.stringValue)
        sqlite3_bind_double(insert, 5, Double(index))
        bindText(insert, 6, values["metadata"]?.jsonText)
        sqlite3_step(insert)
        sqlite3_reset(insert)
        bare.exec("commit")
    }
    bareRates.append(Double(enqueues) / (now() - bareStarted))
    sqlite3_finalize(insert)
}
let enqueueRatio = median(clientRates) / median(bareRates)
print(String(format: "enqueue_per_second %.0f", median(clientRates)))
print(String(format: "bare_insert_per_second %.0f", median(bareRates)))
print(String(format: "enqueue_ratio %.2f (goal >= 0.50) %@", enqueueRatio, enqueueRatio >= 0.5 ? "PASS" : "FAIL"))

// MARK: - first load

// The writer's outbox (rounds x enqueues rows) goes to the server, topped up to loadRows.
var extra = 0
while rounds * enqueues + extra < loadRows {
    try writer.enqueue(.upsert, into: "tasks", row(extra, round: 1000))
    extra += 1
}
try await writer.sync()
let session = try JSONValue(json: Data(contentsOf: scratch.appendingPathComponent("writer/session.json")))
let token = session["accessToken"]!.stringValue!

/// The first load's answers, as the server sends them.
func firstLoadBodies() async throws -> [Data] {
    var bodies: [Data] = []
    var cursor: String?
    repeat {
        var components = URLComponents(url: server.appendingPathComponent("v1/pull"), resolvingAgainstBaseURL: false)!
        components.queryItems =
            [URLQueryItem(name: "limit", value: "1000")]
            + (cursor.map { [URLQueryItem(name: "cursor", value: $0)] } ?? [])
        var request = URLRequest(url: components.url!)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        let (data, _) = try await URLSession.shared.data(for: request)
        bodies.append(data)
        let page = try JSONValue(json: data)
        cursor = page["has_more"] == .bool(true) ? page["cursor"]?.stringValue : nil
    } while cursor != nil
    return bodies
}
let bodies = try await firstLoadBodies()
let pages = try bodies.map { try PullPage(json: try JSONValue(json: $0)) }
let rowCount = pages.reduce(0) { $0 + ($1.changes["tasks"]?.upserts.count ?? 0) }
let schema = writer.tables["tasks"]!

var mergeRates: [Double] = []
var parseMergeRates: [Double] = []
var bulkRates: [Double] = []
for round in 0..<rounds {
    let store = try LocalStore(path: scratch.appendingPathComponent("load-\(round).sqlite").path, userID: userID) { _ in
    }
    try store.apply(schema: [schema])
    var started = now()
    var cursor: String?
    for page in pages {
        _ = try store.merge(page, startedFrom: cursor, syncedAt: Date())
        cursor = page.cursor
    }
    mergeRates.append(Double(rowCount) / (now() - started))
    precondition(store.rowCount == rowCount, "the merge lost rows")

    let parsed = try LocalStore(path: scratch.appendingPathComponent("parse-\(round).sqlite").path, userID: userID) {
        _ in
    }
    try parsed.apply(schema: [schema])
    started = now()
    cursor = nil
    for body in bodies {
        let page = try PullPage(json: try JSONValue(json: body))
        _ = try parsed.merge(page, startedFrom: cursor, syncedAt: Date())
        cursor = page.cursor
    }
    parseMergeRates.append(Double(rowCount) / (now() - started))

    let bare = BareDatabase(scratch.appendingPathComponent("bulk-\(round).sqlite").path)
    bare.exec(bareTable)
    let insert = bare.prepare(
        "insert into tasks (id, user_id, parent_id, title, position, metadata, updated_at) values (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    )
    started = now()
    bare.exec("begin immediate")
    for page in pages {
        for values in page.changes["tasks"]?.upserts ?? [] {
            bindText(insert, 1, values["id"]?.stringValue)
            bindText(insert, 2, values["user_id"]?.stringValue)
            bindText(insert, 3, values["parent_id"]?.stringValue)
            bindText(insert, 4, values["title"]?.stringValue)
            if case .double(let position)? = values["position"] {
                sqlite3_bind_double(insert, 5, position)
            } else {
                sqlite3_bind_double(insert, 5, Double(values["position"]?.integerValue ?? 0))
            }
            bindText(insert, 6, values["metadata"]?.jsonText)
            bindText(insert, 7, values["updated_at"]?.stringValue)
            sqlite3_step(insert)
            sqlite3_reset(insert)
        }
    }
    bare.exec("commit")
    bulkRates.append(Double(rowCount) / (now() - started))
    sqlite3_finalize(insert)
}
let loadRatio = median(mergeRates) / median(bulkRates)
print("first_load_rows \(rowCount) pages \(pages.count)")
print(String(format: "merge_rows_per_second %.0f", median(mergeRates)))
print(String(format: "parse_and_merge_rows_per_second %.0f", median(parseMergeRates)))
print(String(format: "bare_bulk_insert_rows_per_second %.0f", median(bulkRates)))
print(String(format: "first_load_ratio %.2f (goal >= 0.50) %@", loadRatio, loadRatio >= 0.5 ? "PASS" : "FAIL"))
print(String(format: "first_load_ratio_with_parse %.2f", median(parseMergeRates) / median(bulkRates)))

// MARK: - cue -> store updated

// The writer links an email, so a second device (the reader) can sign in as the same user.
let password = "correct horse battery staple"
try await writer.link(email: "bench-\(UUID().uuidString.prefix(12))@example.com", password: password)
var readerConfiguration = FerryClient.Configuration()
readerConfiguration.log = { _ in }
let reader = try await FerryClient(
    server: server, stateDirectory: scratch.appendingPathComponent("reader"), configuration: readerConfiguration)
try await reader.signIn(email: writer.user!.email!, password: password)
precondition(reader.user?.id == userID, "the reader is not the writer's user")
let streamDeadline = now() + 30
while !reader.status.connected && now() < streamDeadline { try await Task.sleep(for: .milliseconds(10)) }
precondition(reader.status.connected, "the reader's cue stream did not open within 30 s")
try await Task.sleep(for: .milliseconds(500))  // the pull that follows the stream's opening

let writerToken = try JSONValue(json: Data(contentsOf: scratch.appendingPathComponent("writer/session.json")))[
    "accessToken"]!.stringValue!

func gateway(_ method: String, _ path: String, query: [URLQueryItem] = [], body: JSONValue? = nil) async throws -> Data
{
    var components = URLComponents(url: server.appendingPathComponent(path), resolvingAgainstBaseURL: false)!
    if !query.isEmpty { components.queryItems = query }
    var request = URLRequest(url: components.url!)
    request.httpMethod = method
    request.setValue("Bearer \(writerToken)", forHTTPHeaderField: "Authorization")
    if let body {
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(body.jsonText.utf8)
    }
    let (data, response) = try await URLSession.shared.data(for: request)
    precondition(
        (response as? HTTPURLResponse)?.statusCode == 200, "\(method) \(path): \(String(decoding: data, as: UTF8.self))"
    )
    return data
}

/// The cursor at the end of what the user's rows have now.
func currentCursor() async throws -> String {
    var cursor: String?
    while true {
        let page = try JSONValue(
            json: try await gateway(
                "GET", "v1/pull",
                query: [URLQueryItem(name: "limit", value: "1000")]
                    + (cursor.map { [URLQueryItem(name: "cursor", value: $0)] } ?? [])))
        cursor = page["cursor"]?.stringValue
        if page["has_more"] != .bool(true) { return cursor! }
    }
}

var cueLatencies: [Double] = []
var pullLatencies: [Double] = []
var missed = 0
var cursor = try await currentCursor()
for round in 0...cueRounds {
    let id = "cue-\(round)-\(UUID().uuidString.prefix(8))"
    let seen = Mutex<Double?>(nil)
    let changes = reader.changes(to: ["tasks"])
    let watcher = Task {
        for await _ in changes {
            if let rows = try? reader.rows(in: "tasks", where: "id = ?1", [.text(id)]), !rows.isEmpty {
                seen.withLock { $0 = now() }
                return
            }
        }
    }
    let mutation: JSONValue = [
        "id": .integer(Int64(1_000_000 + round)), "table": "tasks", "op": "upsert",
        "row": ["id": .string(id), "parent_id": "root", "title": .string("cue \(round)")],
    ]
    _ = try await gateway("POST", "v1/push", body: ["mutations": [mutation]])
    let pushed = now()
    let deadline = pushed + 10
    while seen.withLock({ $0 }) == nil && now() < deadline { try await Task.sleep(for: .milliseconds(1)) }
    watcher.cancel()
    let stored = seen.withLock { $0 }

    // The same change through one bare pull, from the cursor before it.
    let pullStarted = now()
    let answer = try JSONValue(
        json: try await gateway(
            "GET", "v1/pull",
            query: [URLQueryItem(name: "limit", value: "1000"), URLQueryItem(name: "cursor", value: cursor)]))
    let pulled = now()
    precondition(
        answer["changes"]?["tasks"]?["upserts"]?.arrayValue?.contains { $0["id"] == .string(id) } == true,
        "the bare pull did not bring the pushed row")
    cursor = answer["cursor"]!.stringValue!
    // Round 0 warms both paths up.
    if round > 0 {
        if let stored { cueLatencies.append((stored - pushed) * 1000) } else { missed += 1 }
        pullLatencies.append((pulled - pullStarted) * 1000)
    }
    try await Task.sleep(for: .milliseconds(50))
}
let cueP50 = cueLatencies.isEmpty ? .infinity : median(cueLatencies)
let pullP50 = median(pullLatencies)
print("cue_rounds \(cueRounds) missed \(missed)")
print(String(format: "cue_to_store_p50_ms %.2f", cueP50))
print(String(format: "bare_pull_round_trip_p50_ms %.2f", pullP50))
print(
    String(
        format: "cue_to_store_over_pull_ms %.2f (goal <= 5.00) %@", cueP50 - pullP50,
        cueP50 - pullP50 <= 5 && missed == 0 ? "PASS" : "FAIL"))
await reader.close()
await writer.close()
