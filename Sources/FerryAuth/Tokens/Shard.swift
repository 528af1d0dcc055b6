import Foundation

/// Shards (docs/SCALING.md, "Shards"): the cluster a user lives in, named by the user's
/// id and by every refresh token issued to the user, so that haproxy routes each
/// request without a lookup.
public enum Shard {
    /// The highest shard number: 16 bits of a user id hold it.
    public static let maximum = 65535

    /// The shard a user id names, as `ferry.shard_of` (sql/ferry/functions/shards.sql):
    /// the first 16 bits of a version 8 UUID, else 0 (a version 4 id: unsharded, and
    /// every id minted before sharding).
    public static func of(_ id: UUID) -> Int {
        let bytes = id.uuid
        guard bytes.6 >> 4 == 8 else { return 0 }
        return Int(bytes.0) << 8 | Int(bytes.1)
    }
}
