/// The kinds of write a mutation makes (push's `op`).
public enum FerryOperation: String, Sendable, Hashable, Codable {
    /// A new row; the same row again is a no-op, a different one under its key is rejected.
    case insert
    /// Insert, or update only the columns given (a merge write).
    case upsert
    /// Delete by key (a tombstone on the server).
    case delete
}
