import FerryAuth

// The error answers of PROTOCOL.md's Accounts section (beside the shared ones in API/).

extension APIError {
    static let alreadyLinked = APIError(
        status: 409, code: "already_linked", message: "this account already has an email")
    static let emailInUse = APIError(status: 409, code: "email_in_use", message: "another account uses this email")
    static let invalidEmail = APIError(status: 400, code: "invalid_email", message: "not a valid email address")
    static let weakPassword = APIError(
        status: 400, code: "weak_password",
        message: "the password needs at least \(PasswordPolicy.minimumCharacters) characters")
    /// The password hasher's queue is full.
    static let signInsBusy = APIError(status: 503, code: "unavailable", message: "too many sign-ins at once; retry")
    static let invalidCredentials = APIError(
        status: 401, code: "invalid_credentials", message: "wrong email or password")
    static let invalidRefreshToken = APIError.unauthorized("the refresh token is not valid")
    static let refreshTokenReused = APIError(
        status: 401, code: "refresh_token_reused",
        message: "this refresh token was already used; the session is revoked")

    /// `409 resolution_required`: the device and the account both have rows.
    static func resolutionRequired(deviceRows: Int, cloudRows: Int) -> APIError {
        APIError(
            status: 409, code: "resolution_required",
            message: "this device has rows of its own: sign in again with resolve keep_cloud or keep_device",
            details: [("device_rows", .integer(deviceRows)), ("cloud_rows", .integer(cloudRows))])
    }

    /// `409 keep_device_across_shards`: the device's anonymous user is on this shard and
    /// the account on another, where its rows cannot move in one transaction.
    static let keepDeviceAcrossShards = APIError(
        status: 409, code: "keep_device_across_shards",
        message: "the account is on another shard: sign in with keep_cloud, then push this device's rows again")
}

// The password and mail answers.
extension APIError {
    static let invalidCode = APIError(
        status: 400, code: "invalid_code", message: "the code is wrong, used or expired; ask for a new one")
    static let anonymousHasNoPassword = APIError(
        status: 403, code: "forbidden", message: "an anonymous account has no password: link an email first")
    /// No SMTP relay is configured (`FERRY_SMTP_URL`), so no code can be mailed.
    static let mailNotConfigured = APIError(
        status: 404, code: "not_found", message: "this server sends no mail (no SMTP relay is configured)")
}
