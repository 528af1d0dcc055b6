import Foundation

extension Account {
    /// `POST /v1/auth/password`: the server ends every session of the account and answers
    /// a new one for this device, which replaces the current one here.
    func changePassword(current: String, new: String) async throws(FerryError) -> StoredSession {
        let answer = try await authorized(
            "POST", "/v1/auth/password",
            body: ["current_password": .string(current), "new_password": .string(new)])
        guard answer.status == 200 else { throw .server(answer.error) }
        guard let old = session else { throw .signedOut }
        let renewed = try Self.session(from: answer, deviceID: old.deviceID)
        try adopt(renewed)
        return renewed
    }

    /// `POST /v1/auth/recover`: mails a reset code to `email` if an account has it (the
    /// server answers the same either way).
    func requestPasswordReset(email: String) async throws(FerryError) {
        let answer = try await api.send("POST", "/v1/auth/recover", body: ["email": .string(email)])
        guard answer.status == 202 || answer.status == 200 else { throw .server(answer.error) }
    }

    /// `POST /v1/auth/recover/confirm`: sets the password of `email`'s account with the
    /// mailed code; the server ends every session of that account. When this device is
    /// signed in to it, the answer's session replaces the current one (returned);
    /// otherwise the device keeps its own account, the answer's session is signed out
    /// again, and nil is returned: sign in with the new password to switch.
    func resetPassword(email: String, code: String, newPassword: String) async throws(FerryError) -> StoredSession? {
        let deviceID = session?.deviceID ?? UUID().uuidString.lowercased()
        let answer = try await api.send(
            "POST", "/v1/auth/recover/confirm",
            body: [
                "email": .string(email), "code": .string(code), "new_password": .string(newPassword),
                "device_id": .string(deviceID),
            ])
        guard answer.status == 200 else { throw .server(answer.error) }
        let reset = try Self.session(from: answer, deviceID: deviceID)
        if let current = session, current.userID == reset.userID {
            try adopt(reset)
            return reset
        }
        _ = try? await api.send("POST", "/v1/auth/signout", token: reset.accessToken)
        return nil
    }
}
