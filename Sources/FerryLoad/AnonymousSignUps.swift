import FerryHTTP
import FerryLoop
import Foundation

/// An anonymous user made for a load run: its id and an access token for it.
public struct SignedUpUser: Sendable, Equatable {
    /// The user id (the token's `sub`).
    public var userID: String
    /// The access token.
    public var accessToken: String

    /// Creates a user record.
    public init(userID: String, accessToken: String) {
        self.userID = userID
        self.accessToken = accessToken
    }

    /// Reads the `201` answer of `POST /v1/auth/anonymous`: `{"user": {"id"}, "session": {"access_token"}}`.
    public init?(signUpAnswer body: some Collection<UInt8>) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let user = object["user"] as? [String: Any], let id = user["id"] as? String,
            let session = object["session"] as? [String: Any], let token = session["access_token"] as? String
        else { return nil }
        self.init(userID: id, accessToken: token)
    }
}

/// Signs up anonymous users through `POST /v1/auth/anonymous`, each on a fresh device
/// id, over a few keep-alive connections on one loop (one request in flight on each).
/// Loop thread only.
public final class AnonymousSignUps: @unchecked Sendable {
    /// The loop the connections run on.
    public let loop: EventLoop
    /// The server.
    public let server: SocketAddress
    /// Users signed up so far.
    public private(set) var users: [SignedUpUser] = []
    /// The first error, which stops the run.
    public private(set) var failure: String?

    private let count: Int
    private let connectionCount: Int
    private let source: SocketAddress?
    private var requested = 0
    private var finished = false
    private var running = 0
    private var completion: (() -> Void)?

    /// Prepares `count` sign-ups over `connections` connections from `source`.
    public init(loop: EventLoop, server: SocketAddress, count: Int, connections: Int, source: SocketAddress? = nil) {
        self.loop = loop
        self.server = server
        self.count = count
        self.connectionCount = max(1, min(connections, count))
        self.source = source
    }

    /// Runs the sign-ups and calls `completion` on the loop when all are done or one failed.
    public func run(_ completion: @escaping () -> Void) {
        loop.preconditionInEventLoop()
        self.completion = completion
        guard count > 0 else { return finish() }
        for _ in 0..<connectionCount { openConnection() }
    }

    private func openConnection() {
        running += 1
        TCPConnection.connect(on: loop, to: server, from: source) { [self] result in
            switch result {
            case .failure(let error): stop(connection: nil, failing: "connect: \(error)")
            case .success(let connection):
                let client = SignUpConnection(owner: self)
                connection.delegate = client
                connection.startReading()
                sendNext(on: connection)
            }
        }
    }

    fileprivate func sendNext(on connection: TCPConnection) {
        guard failure == nil, requested < count else { return stop(connection: connection, failing: nil) }
        requested += 1
        let body = "{\"device_id\":\"\(UUID().uuidString.lowercased())\"}"
        connection.write(
            "POST /v1/auth/anonymous HTTP/1.1\r\nHost: \(server)\r\nContent-Type: application/json\r\n"
                + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
    }

    fileprivate func answered(_ connection: TCPConnection, status: Int, body: [UInt8]) {
        guard status == 201, let user = SignedUpUser(signUpAnswer: body) else {
            let text = String(decoding: body.prefix(300), as: UTF8.self)
            return stop(connection: connection, failing: "sign-up answered \(status): \(text)")
        }
        users.append(user)
        sendNext(on: connection)
    }

    fileprivate func stop(connection: TCPConnection?, failing reason: String?) {
        if let reason, failure == nil { failure = reason }
        connection?.close()
        running -= 1
        if running == 0 { finish() }
    }

    private func finish() {
        guard !finished else { return }
        finished = true
        completion?()
        completion = nil
    }
}

/// Reads one `Content-Length` response after another on a keep-alive connection.
private final class SignUpConnection: TCPConnectionDelegate {
    unowned let owner: AnonymousSignUps
    private var inbox: [UInt8] = []

    init(owner: AnonymousSignUps) { self.owner = owner }

    func connection(_ connection: TCPConnection, didRead bytes: UnsafeRawBufferPointer) {
        inbox.append(contentsOf: bytes)
        switch HTTPResponseHead.parse(inbox[...]) {
        case .incomplete:
            return
        case .invalid:
            owner.stop(connection: connection, failing: "invalid response head")
        case .complete(let head):
            guard let length = head.headers["content-length"].flatMap({ Int($0) }) else {
                return owner.stop(connection: connection, failing: "answer without Content-Length")
            }
            guard inbox.count >= head.length + length else { return }
            let body = Array(inbox[head.length..<(head.length + length)])
            inbox.removeFirst(head.length + length)
            owner.answered(connection, status: head.status, body: body)
        }
    }

    func connectionDidReachEnd(_ connection: TCPConnection) {
        owner.stop(connection: connection, failing: "the server closed the connection")
    }

    func connectionDidDrain(_ connection: TCPConnection) {}
    func connectionDidClose(_ connection: TCPConnection, error: LoopError?) {}
}
