import Foundation

#if canImport(Security)
    import Security
#endif

/// The tokens of a signed-in device and who they belong to: what a ``SessionStore`` keeps.
public struct StoredSession: Sendable, Hashable, Codable {
    /// The JWT sent as Bearer.
    public var accessToken: String
    /// The token that gets the next session (it rotates at each refresh).
    public var refreshToken: String
    /// When the access token expires (its `exp`).
    public var expiresAt: Date
    /// When it was issued (its `iat`), for the refresh schedule.
    public var issuedAt: Date
    /// The user, the session (`sid`) and the device (`did`) the tokens are for.
    public var userID: String
    /// The server's session id (`sid`).
    public var sessionID: String
    /// This device's id (`did`).
    public var deviceID: String
    /// Whether the account has no email yet.
    public var isAnonymous: Bool
    /// The account's email, once linked.
    public var email: String?
    /// Whether the server has the email confirmed (nil: a session stored before the
    /// server said, when every linked email was).
    public var emailConfirmed: Bool?

    /// The user this session is for, as the app sees it.
    var user: FerryUser {
        FerryUser(
            id: userID, deviceID: deviceID, isAnonymous: isAnonymous, email: email,
            isEmailConfirmed: email != nil && emailConfirmed != false)
    }
}

/// What reading a ``SessionStore`` gave. "Absent" only when the store is sure nothing is
/// there: any failure to read (a locked Keychain before first unlock, an unreadable
/// file, bytes that do not decode) is `unreadable`, and a session is never discarded
/// because of it.
public enum SessionRead: Sendable {
    /// A session was stored, and this is it.
    case present(StoredSession)
    /// The store is sure it holds nothing.
    case absent
    /// The store could not tell, and why (nothing may be discarded because of it).
    case unreadable(String)
}

/// Where the session's tokens are kept. FerryClient writes it only when the session
/// changes (sign-up, refresh, sign-in, link) and removes it only at sign-out, account
/// deletion, or when the server has ended the session.
public protocol SessionStore: Sendable {
    /// The stored session, or why it cannot be read.
    func load() -> SessionRead
    /// Replaces the stored session (atomically: a crash leaves the old or the new one).
    func save(_ session: StoredSession) throws
    /// Removes the stored session; nothing stored is fine.
    func remove() throws
}

/// A session kept in a file readable only by its owner (0600), replaced atomically: the
/// default on Linux and wherever there is no Keychain.
public struct FileSessionStore: SessionStore {
    /// The file (`session.json` in the state folder by default).
    public let path: String

    /// A store in the file `path`.
    public init(path: String) { self.path = path }

    /// Reads the file: absent, a session, or unreadable (never a guess).
    public func load() -> SessionRead {
        switch StateFiles.read(path) {
        case .absent: return .absent
        case .unreadable(let reason): return .unreadable(reason)
        case .present(let data):
            guard let session = try? Self.decoder.decode(StoredSession.self, from: data) else {
                return .unreadable("\(path) does not hold a session")
            }
            return .present(session)
        }
    }

    /// Writes the session atomically, mode 0600.
    public func save(_ session: StoredSession) throws {
        try StateFiles.write(try Self.encoder.encode(session), to: path, mode: 0o600)
    }

    /// Deletes the file (none there: nothing happens).
    public func remove() throws { try StateFiles.remove(path) }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()
    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return decoder
    }()
}

#if canImport(Security)
    /// A session kept in the Keychain as one generic password item, readable after the
    /// device's first unlock (so a background launch finds it). A read that fails for any
    /// reason but "no such item" (`errSecInteractionNotAllowed` before first unlock,
    /// among others) is ``SessionRead/unreadable(_:)``.
    public struct KeychainSessionStore: SessionStore {
        /// The item's service and account.
        public let service: String
        /// The item's account attribute.
        public let account: String

        /// An item under `service` (the app's bundle id is a good one) and `account`.
        public init(service: String, account: String = "ferry.session") {
            self.service = service
            self.account = account
        }

        private var query: [String: Any] {
            [
                kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service,
                kSecAttrAccount as String: account,
            ]
        }

        /// Reads the item: absent, a session, or unreadable (a locked Keychain among others).
        public func load() -> SessionRead {
            var query = self.query
            query[kSecReturnData as String] = true
            query[kSecMatchLimit as String] = kSecMatchLimitOne
            var item: CFTypeRef?
            let status = SecItemCopyMatching(query as CFDictionary, &item)
            if status == errSecItemNotFound { return .absent }
            guard status == errSecSuccess, let data = item as? Data else {
                return .unreadable("Keychain read failed (OSStatus \(status))")
            }
            guard let session = try? FileSessionStore.decoder.decode(StoredSession.self, from: data) else {
                return .unreadable("the Keychain item does not hold a session")
            }
            return .present(session)
        }

        /// Writes the item, readable after the first unlock.
        public func save(_ session: StoredSession) throws {
            let data = try FileSessionStore.encoder.encode(session)
            let update: [String: Any] = [
                kSecValueData as String: data, kSecAttrAccessible as String: kSecAttrAccessibleAfterFirstUnlock,
            ]
            var status = SecItemUpdate(query as CFDictionary, update as CFDictionary)
            if status == errSecItemNotFound {
                status = SecItemAdd(query.merging(update) { _, new in new } as CFDictionary, nil)
            }
            guard status == errSecSuccess else {
                throw FerryError.storage("Keychain write failed (OSStatus \(status))")
            }
        }

        /// Deletes the item (none there: nothing happens).
        public func remove() throws {
            let status = SecItemDelete(query as CFDictionary)
            guard status == errSecSuccess || status == errSecItemNotFound else {
                throw FerryError.storage("Keychain delete failed (OSStatus \(status))")
            }
        }
    }
#endif

/// The non-secret record that this state folder has an account: written next to the
/// store at sign-up and sign-in, removed at sign-out. While it exists, a session store
/// that reads "absent" is taken for unreadable, never for a fresh install.
struct AccountMarker: Sendable, Hashable, Codable {
    var userID: String
    var deviceID: String
    var sessionID: String
    var isAnonymous: Bool
    var email: String?

    init(_ session: StoredSession) {
        userID = session.userID
        deviceID = session.deviceID
        sessionID = session.sessionID
        isAnonymous = session.isAnonymous
        email = session.email
    }
}
