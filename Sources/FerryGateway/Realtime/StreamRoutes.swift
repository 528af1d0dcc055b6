import FerryAuth
import FerryHTTP
import FerryLoop
import Foundation

/// `GET /v1/stream` (WebSocket) and `GET /v1/events` (Server-Sent Events): PROTOCOL.md
/// "Streams". Opening a stream costs no database round trip: the token's signature,
/// times and the revoked-session cache decide, then the connection is taken over from
/// HTTP and handed to the loop's ``CueHub``.
struct StreamRoutes: Sendable {
    let accounts: Accounts
    /// Largest message a WebSocket client may send.
    let maxMessageBytes: Int
    /// How long a WebSocket waits for the client's close frame after sending its own.
    let closeTimeoutMilliseconds: UInt64
    /// Streams per user on this process.
    let quota: ConcurrencyLimit<UUID>

    /// Kernel send buffer of a stream socket. Cues are ~100 bytes, so a small buffer
    /// costs nothing and makes a client that stops reading show as unsent bytes soon,
    /// where coalescing takes over.
    static let sendBufferBytes = 16 * 1024
    /// The SSE `retry:` hint: how long an EventSource waits before reconnecting.
    static let reconnectMilliseconds = 3_000

    func register(in router: inout Router, context: LoopContext) {
        router.group(gate: accounts.streamCallers) { routes in
            register(in: &routes, context: context)
        }
    }

    private func register(in routes: inout RouteGroup<AccessTokenClaims>, context: LoopContext) {
        routes.get("/v1/stream") { request, claims, responder in
            let handshake: WebSocketHandshake
            switch WebSocketHandshake.validate(request) {
            case .failure(let refusal): return responder.respond(refusal.response)
            case .success(let valid): handshake = valid
            }
            guard admit(claims, responder) else { return }
            let tookOver = responder.takeOver { tcp, buffered in
                // Best effort: the kernel's default works too, only bigger.
                try? tcp.setSendBufferSize(Self.sendBufferBytes)
                let stream = WebSocketStream.open(
                    tcp: tcp, bufferedBytes: buffered, handshake: handshake, maxMessageBytes: maxMessageBytes,
                    closeTimeoutMilliseconds: closeTimeoutMilliseconds)
                opened(stream, claims: claims, status: 101, request: request, route: responder.route, context: context)
            }
            if !tookOver { quota.release(claims.userID) }
        }
        routes.get("/v1/events") { request, claims, responder in
            // HEAD (answered by every GET route) learns the headers; it never opens a stream.
            guard request.method != .head else {
                return responder.respond(
                    HTTPResponse(
                        status: .ok, headers: ["Content-Type": "text/event-stream", "Cache-Control": "no-store"]))
            }
            guard admit(claims, responder) else { return }
            let tookOver = responder.takeOver { tcp, buffered in
                // Best effort: the kernel's default works too, only bigger.
                try? tcp.setSendBufferSize(Self.sendBufferBytes)
                let stream = ServerSentEventStream.open(
                    tcp: tcp, bufferedBytes: buffered, retryMilliseconds: Self.reconnectMilliseconds,
                    corsOrigin: responder.corsOrigin)
                opened(stream, claims: claims, status: 200, request: request, route: responder.route, context: context)
            }
            if !tookOver { quota.release(claims.userID) }
        }
    }

    /// Counts a stream against the user's quota, or answers `429` and returns false.
    private func admit(_ claims: AccessTokenClaims, _ responder: HTTPResponder) -> Bool {
        guard quota.take(claims.userID) else {
            let refusal = APIError.rateLimited(
                retryAfterSeconds: 5, message: "this user already has \(quota.limit) streams open; close one first")
            responder.respond(refusal.response)
            return false
        }
        return true
    }

    /// Counts and logs the switch (the HTTP layer no longer sees the connection) and
    /// hands the stream to the hub.
    private func opened(
        _ stream: any EventStream, claims: AccessTokenClaims, status: Int, request: HTTPRequest, route: String?,
        context: LoopContext
    ) {
        context.metrics.recordRequest(route: route, status: status, durationNanoseconds: 0)
        context.log.request(
            method: "GET", route: route, status: status, durationNanoseconds: 0, bytes: 0,
            remote: request.remoteAddress?.description)
        context.hub.add(stream, claims: claims)
    }
}
