import FerryGateway
import FerryTestSupport
import Foundation
import Glibc
import Testing

/// PROTOCOL.md "Conventions": logs must never print a token. A gateway logging at
/// `debug` (every line it has) into a file is asked with access tokens in the
/// `Authorization` header and in `?access_token=` (streams, a route that ignores it, a
/// path that matches nothing, a value that does not decode), and with refresh tokens in
/// bodies; the log then holds request lines for all of it and no token, nor any of a
/// token's three parts.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct TokenLoggingTests {
    @Test(arguments: [Logger.Format.text, .json])
    func noTokenReachesTheLog(format: Logger.Format) async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-tokens-\(UUID()).log").path
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        try #require(descriptor >= 0, "cannot create \(path)")
        defer {
            close(descriptor)
            unlink(path)
        }
        let logger = Logger(format: format, minimumLevel: .debug, fileDescriptor: descriptor)
        var secrets: [String] = []
        try await AccountsDatabase.with { database in
            try await withStartedGateway(databaseURL: database.gatewayURL, logger: logger) { gateway, port in
                let server = AccountsGateway(database: database, gateway: gateway, port: port)
                let session = try await server.signUpAnonymous()
                let token = session.accessToken
                secrets += [token, session.refreshToken] + token.split(separator: ".").map(String.init)

                #expect(try await server.me(token).status == 200)
                #expect(
                    try await server.call("GET", "/v1/auth/user", headers: [("Authorization", "Bearer \(token)x")])
                        .status == 401)
                for transport in [StreamTestClient.Transport.webSocket, .serverSentEvents] {
                    let stream = try await server.openStream(session, transport, tokenInQuery: true)
                    _ = try await stream.nextMessageAsync(ofType: "hello")
                    stream.close()
                }
                #expect(try await server.call("GET", "/v1/events?access_token=\(token)x").status == 401)
                #expect(try await server.call("GET", "/v1/events?access_token=\(token)%zz").status == 400)
                #expect(try await server.call("GET", "/v1/pull?access_token=\(token)").status == 401)
                #expect(try await server.call("GET", "/\(token)?access_token=\(token)").status == 404)

                let refreshed = try await server.refresh(session.refreshToken)
                #expect(refreshed.status == 200, "\(refreshed)")
                secrets += [try #require(refreshed.string("session", "refresh_token"))]
                // Again within the grace window: the same successor, logged no more than the first.
                #expect(try await server.refresh(session.refreshToken).status == 200)
            }
        }
        let log = try String(contentsOfFile: path, encoding: .utf8)
        // The log has the requests (so a log that said nothing would not pass) ...
        for route in ["/v1/auth/user", "/v1/stream", "/v1/events", "/v1/pull", "/v1/auth/refresh"] {
            #expect(log.contains(format == .text ? "route=\(route) " : #""route":"\#(route)""#), "\(route) not logged")
        }
        // ... and no token.
        for secret in secrets where secret.utf8.count >= 16 {
            #expect(!log.contains(secret), "the log holds a token (or part of one) \(secret.prefix(12))…:\n\(log)")
        }
    }
}
