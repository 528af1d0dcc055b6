import CLibPQ
import Glibc

/// Conversions from libpq's C values to Ferry's Swift values. Loop thread only (they read a live `PGconn`).
enum LibPQ {
    /// Converts what `PQgetResult` returned and frees it.
    static func event(from result: OpaquePointer?) -> ConnectionStateMachine.ResultEvent {
        guard let result else { return .end }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_TUPLES_OK, PGRES_COMMAND_OK, PGRES_EMPTY_QUERY:
            return .result(self.result(result))
        case PGRES_PIPELINE_SYNC:
            return .sync
        case PGRES_PIPELINE_ABORTED:
            return .pipelineAborted
        case PGRES_FATAL_ERROR, PGRES_NONFATAL_ERROR, PGRES_BAD_RESPONSE:
            return .failure(error(from: result))
        default:
            let status = String(cString: PQresStatus(PQresultStatus(result)))
            return .failure(PostgresError(.unsupported, "unsupported result status \(status) (COPY is not supported)"))
        }
    }

    /// Copies a result's text values into one buffer.
    static func result(_ result: OpaquePointer) -> PostgresResult {
        let rowCount = Int(PQntuples(result))
        let columnCount = Int(PQnfields(result))
        let columns = (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) }
        var total = 0
        for row in 0..<rowCount {
            for column in 0..<columnCount { total += Int(PQgetlength(result, Int32(row), Int32(column))) }
        }
        var storage: [UInt8] = []
        storage.reserveCapacity(total)
        var cells: [PostgresResult.Cell] = []
        cells.reserveCapacity(rowCount * columnCount)
        for row in 0..<rowCount {
            for column in 0..<columnCount {
                let (r, c) = (Int32(row), Int32(column))
                if PQgetisnull(result, r, c) != 0 {
                    cells.append(.init(start: 0, length: -1))
                    continue
                }
                let length = Int(PQgetlength(result, r, c))
                cells.append(.init(start: Int32(storage.count), length: Int32(length)))
                PQgetvalue(result, r, c).withMemoryRebound(to: UInt8.self, capacity: length) {
                    storage.append(contentsOf: UnsafeBufferPointer(start: $0, count: length))
                }
            }
        }
        return PostgresResult(
            columns: columns, count: rowCount, storage: storage, cells: cells,
            commandTag: String(cString: PQcmdStatus(result)))
    }

    /// The server error a result carries.
    static func error(from result: OpaquePointer) -> PostgresError {
        func field(_ code: Character) -> String? {
            guard let value = PQresultErrorField(result, Int32(code.asciiValue!)) else { return nil }
            return String(cString: value)
        }
        let message = field("M") ?? trimmed(PQresultErrorMessage(result))
        let sqlState = field("C")
        // Errors libpq makes up itself (lost connection mid-result) carry no SQLSTATE.
        let kind: PostgresError.Kind = sqlState == nil ? .connectionLost : .server
        return PostgresError(
            kind, message, sqlState: sqlState, detail: field("D"), hint: field("H"), severity: field("V"))
    }

    /// Where a connection attempt stands, in words, for a connect that timed out.
    static func connectPhase(_ connection: OpaquePointer?) -> String {
        guard let connection else { return "no connection" }
        switch PQstatus(connection) {
        case CONNECTION_STARTED, CONNECTION_NEEDED: return "opening the TCP connection"
        case CONNECTION_MADE: return "sending the startup message"
        case CONNECTION_SSL_STARTUP: return "waiting for the answer to the SSL request"
        case CONNECTION_GSS_STARTUP: return "waiting for the answer to the GSSAPI request"
        case CONNECTION_AWAITING_RESPONSE: return "waiting for the server to authenticate"
        case CONNECTION_AUTH_OK: return "authenticated, waiting for the server to be ready"
        case let status: return "libpq connection status \(status.rawValue)"
        }
    }

    /// The connection's last error message, without the trailing newline.
    static func message(_ connection: OpaquePointer?) -> String {
        guard let connection else { return "no connection" }
        let text = trimmed(PQerrorMessage(connection))
        return text.isEmpty ? "unknown libpq error" : text
    }

    private static func trimmed(_ pointer: UnsafePointer<CChar>?) -> String {
        guard let pointer else { return "" }
        var text = String(cString: pointer)
        while text.last?.isWhitespace == true { text.removeLast() }
        return text
    }
}

/// Calls `body` with a NULL-terminated C array of the strings, valid during the call.
func withCStringArray<R>(_ strings: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let copies = strings.map { $0.flatMap { strdup($0) } }
    defer { for copy in copies { free(copy) } }
    return body(copies.map { $0.map { UnsafePointer($0) } } + [nil])
}
