import FerryPostgres
import FerryTestSupport
import Foundation
import Testing

@testable import FerryGateway

/// A query whose answer reads a column its SQL does not name: the mistake a renamed
/// column in Swift makes.
private struct MisreadQuery: SingleRowQuery {
    static let preparedName: String? = "test_misread"
    static let sql = "select 1 as count"
    static let columns = ["count"]
    var parameters: [String?] { [] }

    struct Answer: QueryRowDecodable {
        var total: Int
        init(_ row: QueryRow) throws(QueryShapeError) { total = try row.decode("total") }
    }
}

/// A query's answer is read by column name from a result whose columns are exactly the
/// query's: a renamed, missing, extra or reordered column, a NULL where a value must be,
/// a value of the wrong type or a wrong number of rows is a ``QueryShapeError``, never a
/// value read from the wrong column. No database: the results are built by hand.
@Suite(.tagSelection) struct QueryDecodingTests {
    static let user = "8c5e1a5e-2f4b-4a8e-9d43-1b2c3d4e5f60"
    static let session = "3b1f0000-0000-4000-8000-000000000001"

    func refresh(_ columns: [String], _ row: [String?]) throws(QueryShapeError) -> RefreshSession.Answer {
        try RefreshSession.decode(PostgresResult(columns: columns, rows: [row], commandTag: "SELECT 1"))
    }

    /// What `body` failed with; nil when it did not fail, or failed otherwise (which no
    /// expectation below accepts).
    func problem(_ body: () throws -> Void) -> QueryShapeError.Problem? {
        do {
            try body()
            return nil
        } catch {
            return (error as? QueryShapeError)?.problem
        }
    }

    @Test func readsEachValueFromTheColumnOfItsName() throws {
        let answer = try refresh(
            RefreshSession.columns, ["ok", Self.user, Self.session, "device-1", "a@example.com", nil, "t"])
        guard case .rotated(let user, let session, let device, let email, let confirmed, nil) = answer else {
            Issue.record("expected rotated, got \(answer)")
            return
        }
        #expect(user == UUID(uuidString: Self.user))
        #expect(session == UUID(uuidString: Self.session))
        #expect(device == "device-1")
        #expect(email == "a@example.com")
        #expect(confirmed)
        let grace = try refresh(
            RefreshSession.columns, ["grace", Self.user, Self.session, "device-1", nil, "sealed", "f"])
        guard case .rotated(_, _, _, nil, false, "sealed") = grace else {
            Issue.record("expected the sealed successor, got \(grace)")
            return
        }
    }

    @Test func aRenamedColumnFailsNamingBothLists() {
        var columns = RefreshSession.columns
        columns[3] = "device"
        let found = problem { _ = try refresh(columns, ["ok", Self.user, Self.session, "device-1", nil, nil, nil]) }
        #expect(found == .columns(expected: RefreshSession.columns, found: columns))
    }

    @Test func swappedColumnsFailInsteadOfShifting() {
        // user_id and session_id swapped in the select list: both are uuids, so a read by
        // position would hand out the session as the user without a sound.
        let columns = ["status", "session_id", "user_id", "device_id", "email", "sealed", "email_confirmed"]
        let found = problem { _ = try refresh(columns, ["ok", Self.session, Self.user, "device-1", nil, nil, nil]) }
        #expect(found == .columns(expected: RefreshSession.columns, found: columns))
    }

    @Test func aMissingOrAnExtraColumnFails() {
        let missing = Array(RefreshSession.columns.dropLast())
        #expect(
            problem { _ = try refresh(missing, ["ok", Self.user, Self.session, "device-1", nil, nil]) }
                == .columns(expected: RefreshSession.columns, found: missing))
        let extra = RefreshSession.columns + ["created_at"]
        #expect(
            problem { _ = try refresh(extra, ["ok", Self.user, Self.session, "device-1", nil, nil, nil, "now"]) }
                == .columns(expected: RefreshSession.columns, found: extra))
    }

    @Test func aReadOfAColumnTheQueryDoesNotHaveFails() {
        let result = PostgresResult(columns: ["count"], rows: [["1"]], commandTag: "SELECT 1")
        let found = problem { _ = try MisreadQuery.decode(result) }
        #expect(found == .missingColumn("total", columns: ["count"]))
    }

    @Test func aNullWhereAValueMustBeFails() {
        let found = problem {
            _ = try refresh(RefreshSession.columns, ["ok", nil, Self.session, "device-1", nil, nil, nil])
        }
        #expect(found == .null(column: "user_id"))
    }

    @Test func aValueOfTheWrongTypeFailsWithoutRepeatingIt() {
        let result = PostgresResult(
            columns: FindCredentials.columns, rows: [["not-a-uuid", "$argon2id$secret", "t"]], commandTag: "SELECT 1")
        // FindCredentials reads user_id as text; SignUpAnonymous reads it as a UUID.
        let signUp = PostgresResult(
            columns: SignUpAnonymous.columns, rows: [["$argon2id$secret", Self.session]], commandTag: "SELECT 1")
        #expect(throws: Never.self) { try FindCredentials.decode(result) }
        do throws(QueryShapeError) {
            _ = try SignUpAnonymous.decode(signUp)
            Issue.record("a user_id that is no UUID was read")
        } catch {
            #expect(error.problem == .unreadable(column: "user_id", type: "UUID"))
            #expect(error.query == "ferry_sign_up_anonymous")
            #expect(!error.description.contains("secret"), "the log line must not carry the value: \(error)")
        }
    }

    @Test func aSingleRowQueryWithNoRowsOrTwoFails() {
        let none = PostgresResult(columns: SignUpAnonymous.columns, rows: [], commandTag: "SELECT 0")
        #expect(problem { _ = try SignUpAnonymous.decode(none) } == .rows(expected: "1", found: 0))
        let two = PostgresResult(
            columns: SignUpAnonymous.columns, rows: [[Self.user, Self.session], [Self.user, Self.session]],
            commandTag: "SELECT 2")
        #expect(problem { _ = try SignUpAnonymous.decode(two) } == .rows(expected: "1", found: 2))
    }

    @Test func aFailedDatabaseCallStaysTheDatabasesError() {
        let error = PostgresError(.server, "boom", sqlState: "57014")
        guard case .failure(.database(let kept)) = CurrentAccount.decode(.failure(error)) else {
            Issue.record("expected the database's error")
            return
        }
        #expect(kept.sqlState == "57014")
    }

    @Test func everyQueryHasItsOwnPreparedName() {
        let names = GatewayQueries.all.compactMap { $0.preparedName }
        #expect(Set(names).count == names.count, "one name, one SQL: \(names)")
        #expect(!names.contains("ferry_identity"), "the identity statement's name")
        #expect(!names.contains("ferry_settings"), "the transaction settings' name")
    }
}
