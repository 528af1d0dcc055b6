/// The answer to `POST /v1/push`: `{"last_mutation_id", "results": [{"id", "status", "original"?, "code"?, "message"?}]}`.
struct PushAnswer: Sendable, Decodable, Equatable {
    /// What became of one mutation.
    struct Result: Sendable, Decodable, Equatable {
        /// `applied`, `duplicate` (answered before: a retried push), `rejected` (final).
        enum Status: String, Sendable, Decodable {
            case applied, duplicate, rejected
        }
        /// A duplicate's first outcome, while the server remembers it.
        enum Original: String, Sendable, Decodable {
            case applied, rejected
        }
        /// The mutation's id, as pushed.
        var id: Int64
        var status: Status
        /// A duplicate's first outcome (nil: not remembered, or not a duplicate).
        var original: Original?
        /// A rejection's code (`immutable`, `constraint_violation`, …), a duplicate's when it was rejected.
        var code: String?
        /// A rejection's human text.
        var message: String?
    }

    var results: [Result]
    private enum CodingKeys: String, CodingKey { case results }
}

extension PushAnswer.Result {
    /// Whether the server refused the mutation: a rejection, or a duplicate of one.
    var wasRejected: Bool { status == .rejected || (status == .duplicate && original == .rejected) }
}
