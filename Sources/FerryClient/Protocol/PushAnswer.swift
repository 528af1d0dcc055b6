/// The answer to `POST /v1/push`: `{"last_mutation_id", "results": [{"id", "status", "code"?, "message"?}]}`.
struct PushAnswer: Sendable, Decodable, Equatable {
    /// What became of one mutation.
    struct Result: Sendable, Decodable, Equatable {
        /// `applied`, `duplicate` (applied before: a retried push), `rejected` (final).
        enum Status: String, Sendable, Decodable {
            case applied, duplicate, rejected
        }
        /// The mutation's id, as pushed.
        var id: Int64
        var status: Status
        /// A rejection's code (`immutable`, `constraint_violation`, …).
        var code: String?
        /// A rejection's human text.
        var message: String?
    }

    var results: [Result]
    private enum CodingKeys: String, CodingKey { case results }
}
