import FerryJSON
import Foundation

/// What an access token says: who is asking, from which session and device, and
/// for how long. The JSON names are PROTOCOL.md's: `sub`, `sid`, `did`, `anon`,
/// `iat`, `exp`.
public struct AccessTokenClaims: Sendable, Equatable {
    /// The user (`sub`).
    public var userID: UUID
    /// The session the token was issued for (`sid`): revoking it stops the token.
    public var sessionID: UUID
    /// The device the token acts as (`did`), as the client named it.
    public var deviceID: String
    /// Whether the user has no email yet (`anon`).
    public var isAnonymous: Bool
    /// When the token was issued (`iat`), seconds since 1970.
    public var issuedAt: Int
    /// When the token stops being accepted (`exp`, before the leeway), seconds since 1970.
    public var expiresAt: Int

    /// Claims from their parts.
    public init(
        userID: UUID, sessionID: UUID, deviceID: String, isAnonymous: Bool, issuedAt: Int, expiresAt: Int
    ) {
        self.userID = userID
        self.sessionID = sessionID
        self.deviceID = deviceID
        self.isAnonymous = isAnonymous
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }
}

/// Why an access token was refused. Only ``expired`` has its own answer
/// (`401 token_expired`, so the client refreshes); every other case is
/// `401 unauthorized` and the detail is for logs and tests, never for the client.
public enum AccessTokenError: Error, Sendable, Equatable {
    /// Signed by us and otherwise valid, but past `exp` plus the leeway.
    case expired
    /// Not three base64url segments of JSON objects, or longer than
    /// ``AccessTokenSigner/maximumTokenBytes``.
    case malformed
    /// The header is not exactly `alg: HS256` (optionally `typ: JWT`).
    case unsupportedHeader
    /// The signature matches neither the current nor the previous secret.
    case badSignature
    /// A claim is missing, duplicated or of the wrong JSON type.
    case invalidClaims
    /// `iat` is later than now plus the leeway.
    case issuedInFuture

    /// The PROTOCOL.md error code to answer with (status 401 either way).
    public var code: String { self == .expired ? "token_expired" : "unauthorized" }
}

/// Signs and verifies HS256 JWT access tokens (RFC 7519) with the current
/// secret, accepting the previous one too while keys rotate.
///
/// A plain value: share one per process or copy one per loop; every method is
/// safe from any thread. ``verify(_:now:)`` runs on every authenticated request:
/// it works on the token's own UTF-8 bytes, checks the header against the one we
/// emit before decoding anything, checks the signature with one HMAC and
/// `CRYPTO_memcmp` before reading the claims, and reads the claims with
/// ``JSONObjectReader``; it allocates only the device id's string. The MAC runs on a
/// context keyed once (``HMACKey``), not OpenSSL's one-shot `HMAC`, which looked the
/// algorithm up on every call and was half of a verify's 2.3 µs; a token signed with
/// the previous secret costs one more MAC.
public struct AccessTokenSigner: Sendable {
    /// Tokens longer than this are refused before any work (a real one is ~300 bytes;
    /// keep device ids under ~1 KiB so signed tokens stay well within it).
    public static let maximumTokenBytes = 4096
    /// The header every token is signed with: `{"alg":"HS256","typ":"JWT"}`.
    static let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))

    /// Seconds a token is valid after it is issued.
    public let lifetimeSeconds: Int
    /// Seconds of clock difference forgiven on `exp` and `iat`.
    public let leewaySeconds: Int
    private let secret: HMACKey
    private let previousSecret: HMACKey?

    /// A signer with `secret`, also accepting tokens signed with `previousSecret`.
    public init(secret: String, previousSecret: String? = nil, lifetimeSeconds: Int = 3600, leewaySeconds: Int = 30) {
        precondition(!secret.isEmpty, "an HS256 secret cannot be empty")
        precondition(lifetimeSeconds > 0 && leewaySeconds >= 0, "token lifetime must be positive, leeway not negative")
        self.secret = HMACKey(Array(secret.utf8))
        self.previousSecret = previousSecret.map { HMACKey(Array($0.utf8)) }
        self.lifetimeSeconds = lifetimeSeconds
        self.leewaySeconds = leewaySeconds
    }

    /// Claims for a token issued `now` (seconds since 1970) that expires after ``lifetimeSeconds``.
    public func claims(
        userID: UUID, sessionID: UUID, deviceID: String, isAnonymous: Bool,
        now: Int = Int(Date().timeIntervalSince1970)
    ) -> AccessTokenClaims {
        AccessTokenClaims(
            userID: userID, sessionID: sessionID, deviceID: deviceID, isAnonymous: isAnonymous, issuedAt: now,
            expiresAt: now + lifetimeSeconds)
    }

    /// How long after it is issued a token is accepted at most: its lifetime and the leeway.
    public var acceptanceSeconds: Int { lifetimeSeconds + leewaySeconds }

    /// The last second (since 1970) at which a token issued at `issuedAt` is still
    /// accepted: what ``RevokedSessions/revoke(_:until:)`` must remember a session
    /// until.
    public func lastAcceptedSecond(issuedAt: Int) -> Int {
        issuedAt + acceptanceSeconds
    }

    // MARK: - Signing

    /// The compact JWT for `claims`, signed with the current secret.
    public func sign(_ claims: AccessTokenClaims) -> String {
        var payload: [UInt8] = []
        payload.reserveCapacity(192 + claims.deviceID.utf8.count)
        payload.append(contentsOf: #"{"sub":""#.utf8)
        payload.append(contentsOf: claims.userID.lowercasedString.utf8)
        payload.append(contentsOf: #"","sid":""#.utf8)
        payload.append(contentsOf: claims.sessionID.lowercasedString.utf8)
        payload.append(contentsOf: #"","did":"#.utf8)
        JSONString.append(claims.deviceID, to: &payload)
        payload.append(contentsOf: #","anon":\#(claims.isAnonymous),"iat":"#.utf8)
        payload.appendDecimal(claims.issuedAt)
        payload.append(contentsOf: #","exp":"#.utf8)
        payload.appendDecimal(claims.expiresAt)
        payload.append(UInt8(ascii: "}"))
        let signingInput = Self.header + "." + Base64URL.encode(payload)
        let signature = Array(signingInput.utf8).withUnsafeBufferPointer { secret.mac($0) }
        return signingInput + "." + Base64URL.encode(signature.array)
    }

    // MARK: - Verifying

    /// The claims of `token` when it is well formed, signed with the current or
    /// previous secret, issued no later than `now` plus the leeway and not expired
    /// at `now` (seconds since 1970) minus the leeway.
    public func verify(
        _ token: some StringProtocol, now: Int = Int(Date().timeIntervalSince1970)
    ) -> Result<AccessTokenClaims, AccessTokenError> {
        if let result = token.utf8.withContiguousStorageIfAvailable({ verify(bytes: $0, now: now) }) {
            return result
        }
        return Array(token.utf8).withUnsafeBufferPointer { verify(bytes: $0, now: now) }
    }

    private func verify(bytes token: UnsafeBufferPointer<UInt8>, now: Int) -> Result<
        AccessTokenClaims, AccessTokenError
    > {
        guard token.count <= Self.maximumTokenBytes,
            let firstDot = token.firstIndex(of: UInt8(ascii: ".")),
            let secondDot = token[(firstDot + 1)...].firstIndex(of: UInt8(ascii: "."))
        else { return .failure(.malformed) }
        // A third dot lands in the signature segment, which base64url decoding refuses.
        let header = UnsafeBufferPointer(rebasing: token[..<firstDot])
        let payload = UnsafeBufferPointer(rebasing: token[(firstDot + 1)..<secondDot])
        let signature = UnsafeBufferPointer(rebasing: token[(secondDot + 1)...])

        if let failure = checkHeader(header) { return .failure(failure) }
        if let failure = checkSignature(signature, of: UnsafeBufferPointer(rebasing: token[..<secondDot])) {
            return .failure(failure)
        }
        guard let decodedCount = Base64URL.decodedCount(encodedCount: payload.count) else {
            return .failure(.malformed)
        }
        let decoded: Result<AccessTokenClaims, AccessTokenError> = withUnsafeTemporaryAllocation(
            of: UInt8.self, capacity: max(decodedCount, 1)
        ) { buffer in
            guard let count = Base64URL.decode(payload, into: buffer) else { return .failure(.malformed) }
            return Self.readClaims(UnsafeBufferPointer(rebasing: buffer[..<count]))
        }
        guard case .success(let claims) = decoded else { return decoded }
        if let failure = checkTimes(of: claims, now: now) { return .failure(failure) }
        return .success(claims)
    }

    /// Nil when `claims` were issued no later than `now` plus the leeway and have not
    /// expired at `now` minus the leeway: the part of ``verify(_:now:)`` that changes
    /// with time, for claims verified earlier (``VerifiedTokenCache``).
    public func checkTimes(of claims: AccessTokenClaims, now: Int) -> AccessTokenError? {
        guard claims.issuedAt <= now.saturatingAdd(leewaySeconds) else { return .issuedInFuture }
        guard now < acceptedUntil(claims) else { return .expired }
        return nil
    }

    /// The first second (since 1970) at which `claims` are refused as expired: the
    /// earlier of `exp` and `iat` plus ``lifetimeSeconds``, plus the leeway.
    ///
    /// Ferry issues no token that outlives the lifetime, so a later `exp` (up to
    /// 2^63 - 1, validly signed by whoever holds a secret) is cut back to it: a revoked
    /// session, remembered for the lifetime and the leeway, outlives every token of it.
    /// Saturating: no `exp` or `iat` overflows.
    public func acceptedUntil(_ claims: AccessTokenClaims) -> Int {
        min(claims.expiresAt, claims.issuedAt.saturatingAdd(lifetimeSeconds)).saturatingAdd(leewaySeconds)
    }

    /// Nil when the header is exactly `alg: HS256` and at most `typ: JWT`.
    private func checkHeader(_ encoded: UnsafeBufferPointer<UInt8>) -> AccessTokenError? {
        // Fast path: the header we emit, byte for byte.
        let isOurs = Self.header.utf8.withContiguousStorageIfAvailable { ours in
            ours.count == encoded.count && memcmp(ours.baseAddress!, encoded.baseAddress!, ours.count) == 0
        }
        if isOurs == true { return nil }
        guard let decodedCount = Base64URL.decodedCount(encodedCount: encoded.count), decodedCount <= 256 else {
            return .malformed
        }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(decodedCount, 1)) { buffer in
            guard let count = Base64URL.decode(encoded, into: buffer) else { return .malformed }
            var sawAlgorithm = false
            var sawType = false
            var unsupported = false
            let isJSON = JSONObjectReader.forEachMember(in: UnsafeBufferPointer(rebasing: buffer[..<count])) {
                key, value in
                if key.equals("alg") {
                    guard !sawAlgorithm, case .string(let algorithm) = value, algorithm.equals("HS256") else {
                        unsupported = true
                        return false
                    }
                    sawAlgorithm = true
                } else if key.equals("typ") {
                    guard !sawType, case .string(let type) = value, type.equals("JWT") else {
                        unsupported = true
                        return false
                    }
                    sawType = true
                } else {
                    // `kid`, `crit`, `jku`, …: nothing we issue, so nothing we accept.
                    unsupported = true
                    return false
                }
                return true
            }
            if unsupported { return .unsupportedHeader }
            guard isJSON else { return .malformed }
            return sawAlgorithm ? nil : .unsupportedHeader
        }
    }

    /// Nil when `encoded` is the HMAC-SHA256 of `signingInput` under either secret.
    private func checkSignature(
        _ encoded: UnsafeBufferPointer<UInt8>, of signingInput: UnsafeBufferPointer<UInt8>
    ) -> AccessTokenError? {
        guard encoded.count == Base64URL.encodedCount(byteCount: 32) else { return .malformed }
        var presented = HMACDigest()
        let decoded = withUnsafeMutableBytes(of: &presented.bytes) {
            Base64URL.decode(encoded, into: $0.bindMemory(to: UInt8.self))
        }
        guard decoded == 32 else { return .malformed }
        if secret.mac(signingInput) == presented { return nil }
        if let previousSecret, previousSecret.mac(signingInput) == presented { return nil }
        return .badSignature
    }

    /// Reads the six claims, each exactly once and of its JSON type; other members are ignored.
    private static func readClaims(_ json: UnsafeBufferPointer<UInt8>) -> Result<AccessTokenClaims, AccessTokenError> {
        var userID: UUID?
        var sessionID: UUID?
        var deviceID: String?
        var isAnonymous: Bool?
        var issuedAt: Int?
        var expiresAt: Int?
        var badClaim = false
        let isJSON = JSONObjectReader.forEachMember(in: json) { key, value in
            switch (key, value) {
            case (_, _) where key.equals("sub"):
                guard userID == nil, case .string(let text) = value, let id = uuid(text) else { break }
                userID = id
                return true
            case (_, _) where key.equals("sid"):
                guard sessionID == nil, case .string(let text) = value, let id = uuid(text) else { break }
                sessionID = id
                return true
            case (_, _) where key.equals("did"):
                guard deviceID == nil, case .string(let text) = value, let id = text.decoded() else { break }
                deviceID = id
                return true
            case (_, _) where key.equals("anon"):
                guard isAnonymous == nil, case .bool(let flag) = value else { break }
                isAnonymous = flag
                return true
            case (_, _) where key.equals("iat"):
                guard issuedAt == nil, case .integer(let seconds) = value else { break }
                issuedAt = seconds
                return true
            case (_, _) where key.equals("exp"):
                guard expiresAt == nil, case .integer(let seconds) = value else { break }
                expiresAt = seconds
                return true
            default:
                return true
            }
            badClaim = true
            return false
        }
        if badClaim { return .failure(.invalidClaims) }
        guard isJSON else { return .failure(.malformed) }
        guard let userID, let sessionID, let deviceID, let isAnonymous, let issuedAt, let expiresAt else {
            return .failure(.invalidClaims)
        }
        return .success(
            AccessTokenClaims(
                userID: userID, sessionID: sessionID, deviceID: deviceID, isAnonymous: isAnonymous,
                issuedAt: issuedAt, expiresAt: expiresAt))
    }

    /// A UUID from its 36-character text (either case), without building a String.
    private static func uuid(_ text: JSONObjectReader.RawString) -> UUID? {
        guard !text.hasEscapes, text.bytes.count == 36 else { return nil }
        var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let parsed = withUnsafeMutableBytes(of: &uuid) { output -> Bool in
            var offset = 0
            for index in 0..<16 {
                if offset == 8 || offset == 13 || offset == 18 || offset == 23 {
                    guard text.bytes[offset] == UInt8(ascii: "-") else { return false }
                    offset += 1
                }
                guard let high = hexDigit(text.bytes[offset]), let low = hexDigit(text.bytes[offset + 1]) else {
                    return false
                }
                output[index] = high << 4 | low
                offset += 2
            }
            return true
        }
        return parsed ? UUID(uuid: uuid) : nil
    }

    private static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
