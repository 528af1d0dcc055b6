/// The email rule for accounts (`400 invalid_email`).
public enum EmailAddress {
    /// The longest address accepted, in UTF-8 bytes (RFC 5321's path limit less the brackets).
    public static let maximumBytes = 254

    /// `text` trimmed and lowercased when it looks like an address, else nil.
    ///
    /// One `@`, a non-empty local part, a domain of non-empty dot-separated labels
    /// (at least two), no whitespace or control characters anywhere, at most
    /// ``maximumBytes``. Deliberately no more: whether it receives mail is for a
    /// confirmation email to find out. The lowercased form is what the database
    /// stores and compares, so `Ana@X.org` and `ana@x.org` are one account.
    public static func normalize(_ text: String) -> String? {
        let address = text.trimmingWhitespace().lowercased()
        guard address.utf8.count <= maximumBytes,
            !address.unicodeScalars.contains(where: {
                $0.properties.isWhitespace || $0.properties.generalCategory == .control
            }),
            let at = address.firstIndex(of: "@")
        else { return nil }
        let local = address[..<at]
        let domain = address[address.index(after: at)...]
        guard !local.isEmpty, !domain.contains("@") else { return nil }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, labels.allSatisfy({ !$0.isEmpty }) else { return nil }
        return address
    }
}

extension String {
    /// The string without leading and trailing whitespace and newlines.
    fileprivate func trimmingWhitespace() -> Substring {
        let isSpace: (Character) -> Bool = { $0.isWhitespace }
        guard let first = firstIndex(where: { !isSpace($0) }) else { return "" }
        let last = lastIndex(where: { !isSpace($0) })!
        return self[first...last]
    }
}
