import FerryAuth
import FerryHTTP
import Foundation

// The bodies of PROTOCOL.md's Accounts requests, read and checked: a route gets values it
// can use, or the `400` that says what is wrong.

/// `POST /v1/auth/anonymous`: `{"device_id"}`.
struct SignUpRequest {
    /// A UUID, lowercased.
    var deviceID: String

    private struct Body: Decodable {
        var deviceID: String
        enum CodingKeys: String, CodingKey { case deviceID = "device_id" }
    }

    static func read(_ request: HTTPRequest) -> Result<SignUpRequest, APIError> {
        RequestBody.decode(Body.self, from: request).flatMap { body in
            guard let device = DeviceID.normalize(body.deviceID) else { return .failure(DeviceID.invalid) }
            return .success(SignUpRequest(deviceID: device))
        }
    }
}

/// `POST /v1/auth/refresh`: `{"refresh_token"}`.
struct RefreshRequest: Decodable {
    var refreshToken: String

    enum CodingKeys: String, CodingKey { case refreshToken = "refresh_token" }

    static func read(_ request: HTTPRequest) -> Result<RefreshRequest, APIError> {
        RequestBody.decode(RefreshRequest.self, from: request)
    }
}

/// `POST /v1/auth/link`: `{"email", "password"}`.
struct LinkRequest: Decodable {
    var email: String
    var password: String

    static func read(_ request: HTTPRequest) -> Result<LinkRequest, APIError> {
        RequestBody.decode(LinkRequest.self, from: request)
    }

    /// The email normalised, once it and the password are acceptable.
    func checked() -> Result<LinkRequest, APIError> {
        guard let email = EmailAddress.normalize(email) else { return .failure(.invalidEmail) }
        guard PasswordPolicy.isAcceptable(password) else { return .failure(.weakPassword) }
        return .success(LinkRequest(email: email, password: password))
    }
}

/// `POST /v1/auth/signin`: `{"email", "password", "device_id", "resolve"?}`.
struct SignInRequest {
    /// Normalised when it is an email; else lowercased (it matches no account, and counts
    /// against the failed sign-ins of that text).
    var email: String
    var password: String
    /// A UUID, lowercased.
    var deviceID: String
    /// `keep_cloud`, `keep_device` or nil.
    var resolve: String?

    private struct Body: Decodable {
        var email: String
        var password: String
        var deviceID: String
        var resolve: String?
        enum CodingKeys: String, CodingKey {
            case email, password
            case deviceID = "device_id"
            case resolve
        }
    }

    static func read(_ request: HTTPRequest) -> Result<SignInRequest, APIError> {
        RequestBody.decode(Body.self, from: request).flatMap { body in
            guard let device = DeviceID.normalize(body.deviceID) else { return .failure(DeviceID.invalid) }
            guard body.resolve == nil || body.resolve == "keep_cloud" || body.resolve == "keep_device" else {
                return .failure(.invalidRequest("resolve must be keep_cloud or keep_device"))
            }
            return .success(
                SignInRequest(
                    email: EmailAddress.normalize(body.email) ?? body.email.lowercased(), password: body.password,
                    deviceID: device, resolve: body.resolve))
        }
    }
}

/// `DELETE /v1/account`: `{"confirm": "DELETE"}`.
struct DeleteRequest: Decodable {
    var confirm: String?

    /// Nil when the body confirms the deletion; else the refusal: `invalid_json` for a body
    /// that is not JSON, as on every route; `confirmation_required` for JSON that is not the
    /// confirmation, or none.
    static func refusal(of request: HTTPRequest) -> APIError? {
        if !request.body.isEmpty, let refusal = RequestBody.refusal(of: request.body) { return refusal }
        guard case .success(let body) = RequestBody.decode(DeleteRequest.self, from: request), body.confirm == "DELETE"
        else {
            return APIError(
                status: 400, code: "confirmation_required",
                message: #"send {"confirm": "DELETE"} to delete this account and all its data"#)
        }
        return nil
    }
}

/// A device id as stored: a UUID, lowercased.
enum DeviceID {
    static func normalize(_ text: String) -> String? {
        UUID(uuidString: text).map { $0.lowercasedString }
    }

    static let invalid = APIError.invalidRequest("device_id must be a UUID")
}
