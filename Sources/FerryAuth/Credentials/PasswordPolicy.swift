/// The password rule for accounts (`400 weak_password`).
public enum PasswordPolicy {
    /// The fewest characters (grapheme clusters) accepted.
    public static let minimumCharacters = 8
    /// The most UTF-8 bytes accepted: bounds what one hash costs to compute.
    public static let maximumBytes = 1024

    /// Whether `password` may be set: at least ``minimumCharacters``, at most ``maximumBytes``.
    public static func isAcceptable(_ password: String) -> Bool {
        let bytes = password.utf8.count
        // Checking the byte count first keeps `count` (a grapheme walk) off huge input.
        return bytes <= maximumBytes && bytes >= minimumCharacters && password.count >= minimumCharacters
    }
}
