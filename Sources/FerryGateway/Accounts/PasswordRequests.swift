import FerryAuth
import FerryHTTP

// The bodies of PROTOCOL.md's password requests, read and checked.

/// `POST /v1/auth/password`: `{"current_password", "new_password"}`.
struct PasswordChangeRequest {
    var currentPassword: String
    /// Acceptable to ``PasswordPolicy``.
    var newPassword: String

    private struct Body: Decodable {
        var currentPassword: String
        var newPassword: String
        enum CodingKeys: String, CodingKey {
            case currentPassword = "current_password"
            case newPassword = "new_password"
        }
    }

    static func read(_ request: HTTPRequest) -> Result<PasswordChangeRequest, APIError> {
        RequestBody.decode(Body.self, from: request).flatMap { body in
            guard PasswordPolicy.isAcceptable(body.newPassword) else { return .failure(.weakPassword) }
            return .success(PasswordChangeRequest(currentPassword: body.currentPassword, newPassword: body.newPassword))
        }
    }
}

/// `POST /v1/auth/recover`: `{"email"}`.
struct RecoverRequest {
    /// Normalised.
    var email: String

    private struct Body: Decodable {
        var email: String
    }

    static func read(_ request: HTTPRequest) -> Result<RecoverRequest, APIError> {
        RequestBody.decode(Body.self, from: request).flatMap { body in
            guard let email = EmailAddress.normalize(body.email) else { return .failure(.invalidEmail) }
            return .success(RecoverRequest(email: email))
        }
    }
}

/// `POST /v1/auth/recover/confirm`: `{"email", "code", "new_password", "device_id"}`.
struct RecoverConfirmRequest {
    /// Normalised.
    var email: String
    /// Normalised (``OneTimeCode/normalize(_:)``); nil when it cannot be a code, which is
    /// `invalid_code` like a wrong one (after the same limits).
    var code: String?
    /// Acceptable to ``PasswordPolicy``.
    var newPassword: String
    /// A UUID, lowercased.
    var deviceID: String

    private struct Body: Decodable {
        var email: String
        var code: String
        var newPassword: String
        var deviceID: String
        enum CodingKeys: String, CodingKey {
            case email, code
            case newPassword = "new_password"
            case deviceID = "device_id"
        }
    }

    static func read(_ request: HTTPRequest) -> Result<RecoverConfirmRequest, APIError> {
        RequestBody.decode(Body.self, from: request).flatMap { body in
            guard let device = DeviceID.normalize(body.deviceID) else { return .failure(DeviceID.invalid) }
            guard let email = EmailAddress.normalize(body.email) else { return .failure(.invalidEmail) }
            guard PasswordPolicy.isAcceptable(body.newPassword) else { return .failure(.weakPassword) }
            return .success(
                RecoverConfirmRequest(
                    email: email, code: OneTimeCode.normalize(body.code), newPassword: body.newPassword,
                    deviceID: device))
        }
    }
}
