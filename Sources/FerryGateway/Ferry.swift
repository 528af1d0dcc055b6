/// Facts about this build of Ferry.
public enum Ferry {
    /// The release version, also reported by `/metrics` and `ferry version`.
    public static let version = "0.1.0"
    /// The wire protocol version of docs/PROTOCOL.md.
    public static let protocolVersion = 1
}
