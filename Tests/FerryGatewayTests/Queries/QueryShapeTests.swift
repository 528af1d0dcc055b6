import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// Every query the gateway makes (``GatewayQueries/all``) has, on a migrated database,
/// exactly the columns its answer reads (``DatabaseQuery/columns``), in order. Checked
/// without running anything: each statement becomes a temporary view (its parameters
/// NULL), whose columns the catalog lists. So a function's changed result, or a select
/// list edited apart from its Swift, fails here rather than in a request.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct QueryShapeTests {
    /// The columns `sql` answers with, as PostgreSQL plans it.
    static func resultColumns(of sql: String, as view: String, on admin: PostgresClient) async throws -> [String] {
        let unbound = sql.replacingOccurrences(of: #"\$[0-9]+"#, with: "null", options: .regularExpression)
        try await admin.execute("create temporary view \(view) as \(unbound)")
        let columns = try await admin.query(
            "select attname from pg_catalog.pg_attribute where attrelid = $1::regclass and attnum > 0 order by attnum",
            [view])
        return columns.rows.compactMap { $0[0] }
    }

    @Test func everyQuerysSQLHasTheColumnsItsAnswerReads() async throws {
        try await AccountsDatabase.with { database in
            for (index, query) in GatewayQueries.all.enumerated() {
                let columns = try await Self.resultColumns(of: query.sql, as: "query_\(index)", on: database.admin)
                #expect(columns == query.columns, "\(query.logName): \(query.sql)")
            }
        }
    }

    @Test func theCheckSeesARenamedColumn() async throws {
        // The positive control: the same reading of a select list that renames one column.
        try await AccountsDatabase.with { database in
            let renamed = SignUpAnonymous.sql.replacingOccurrences(of: "session_id", with: "session_id as session")
            let columns = try await Self.resultColumns(of: renamed, as: "renamed", on: database.admin)
            #expect(columns == ["user_id", "session"])
            #expect(columns != SignUpAnonymous.columns)
        }
    }
}
