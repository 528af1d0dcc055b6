import FerryHTTP
import FerryLoop
import Foundation

extension Accounts {
    /// Where a request about `email` is answered (docs/SCALING.md, "The email
    /// directory"): `here` when this gateway answers it (no directory or no
    /// `FERRY_SHARD_URLS`, a request already forwarded, an email of this shard or one the
    /// directory does not know), else `elsewhere` with the forward to the account's
    /// shard. A directory that does not answer is `503 directory_unavailable`, answered
    /// here. Loop thread only.
    func route(
        _ email: String, of request: HTTPRequest, _ responder: HTTPResponder, _ context: LoopContext,
        here: @escaping () -> Void, elsewhere: @escaping (ShardForward) -> Void
    ) {
        guard let directory = context.directory, let forwarder, !Self.isForwarded(request) else { return here() }
        let client = request.remoteAddress.map { $0.ip.description }
        let body = request.body
        directory.locate(email, shardPool: context.pool) { location in
            switch location {
            case .here: here()
            case .unknown: responder.respond(APIError.directoryUnavailable.response)
            case .shard(let shard):
                elsewhere(
                    ShardForward(shard: shard, forwarder: forwarder, body: body, client: client, loop: responder.loop))
            }
        }
    }

    /// Whether another shard's gateway forwarded `request` (``ShardForwarder/forwardedHeader``):
    /// it is answered here, never forwarded again.
    static func isForwarded(_ request: HTTPRequest) -> Bool {
        request.headers[ShardForwarder.forwardedHeader] != nil
    }
}

/// A request about an email of another shard, to post there as it came (its body, the
/// client's address), by the one ``ShardForwarder``.
struct ShardForward {
    let shard: Int
    let forwarder: ShardForwarder
    let body: [UInt8]
    let client: String?
    let loop: EventLoop

    /// Posts the body to `path` of the shard; calls back on the loop with its answer, or
    /// the `503 shard_unavailable` to send.
    func post(_ path: String, checkOnly: Bool = false, _ completion: @escaping (HTTPResponse) -> Void) {
        let waiting = LoopBound(completion, loop: loop)
        forwarder.post(path, body: body, client: client, checkOnly: checkOnly, to: shard, on: loop) {
            waiting.value($0)
        }
    }
}

/// `POST /v1/auth/signin` for an account of another shard (docs/SCALING.md, "The email
/// directory"). Without a device session the account's shard answers. With the device's
/// anonymous session of this shard (a first sign-in across shards), what becomes of the
/// device's rows is decided here, by their count:
///
/// - none: the account's shard signs the device in, then the anonymous user is deleted here;
/// - some, no `resolve`: the account's shard only checks the credentials (the same limits
///   and failure counting; no session) and counts its rows: `409 resolution_required`;
/// - `keep_cloud`: signed in there, then the anonymous user and its rows deleted here,
///   `reset: true`;
/// - `keep_device`: checked there, then `409 keep_device_across_shards`: rows cannot move
///   between clusters in one transaction, so the client signs in with `keep_cloud` and
///   pushes them again.
///
/// Any answer but `200` from the account's shard (wrong credentials, a limit, a shard that
/// does not answer) is relayed and changes nothing here. The deletion here comes after the
/// other shard's commit, so it can fail alone: the anonymous user is then left, inactive,
/// for `ferry cleanup-anonymous`. Loop thread only.
struct CrossShardSignIn {
    let request: SignInRequest
    let forward: ShardForward
    /// The user of the device's anonymous session, when it sent one.
    let anonymousUserID: String?
    let responder: HTTPResponder
    let context: LoopContext

    static let path = "/v1/auth/signin"

    func start() {
        guard let anonymousUserID else { return forward.post(Self.path) { [responder] in responder.respond($0) } }
        context.pool.run(UserRows(userID: anonymousUserID)) { [self] result in
            switch result {
            case .failure(let failure): responder.respond(context.failure(failure).response)
            case .success(let rows) where rows.isAnonymous != true:
                // No anonymous user here any more (deleted, or linked since): nothing to decide.
                forward.post(Self.path) { [responder] in responder.respond($0) }
            case .success(let rows) where rows.liveRows == 0: signIn(deleting: anonymousUserID, reset: false)
            case .success(let rows):
                switch request.resolve {
                case "keep_cloud": signIn(deleting: anonymousUserID, reset: true)
                case "keep_device": check { _ in APIError.keepDeviceAcrossShards.response }
                default:
                    check { cloudRows in
                        APIError.resolutionRequired(deviceRows: rows.liveRows, cloudRows: cloudRows).response
                    }
                }
            }
        }
    }

    /// The account's shard checks the credentials and counts its rows; `refusal` makes the
    /// answer from that count when they are right. Nothing changes on either shard.
    private func check(_ refusal: @escaping (_ cloudRows: Int) -> HTTPResponse) {
        forward.post(Self.path, checkOnly: true) { [responder, forward] answer in
            guard answer.status == .ok else { return responder.respond(answer) }
            guard let checked = try? JSONDecoder().decode(SignInCheckAnswer.self, from: Data(answer.body)) else {
                // A gateway that signed in instead (one without the check): not an answer to relay.
                return responder.respond(
                    ShardForwarder.unreachable(forward.shard, "no check-only answer").response)
            }
            responder.respond(refusal(checked.cloudRows))
        }
    }

    /// The account's shard signs the device in; once it has, the anonymous user goes here.
    private func signIn(deleting anonymousUserID: String, reset: Bool) {
        forward.post(Self.path) { [self] answer in
            guard answer.status == .ok else { return responder.respond(answer) }
            var relayed = answer
            if reset {
                guard var signedIn = try? JSONDecoder().decode(SignInAnswer.self, from: Data(answer.body)) else {
                    return responder.respond(APIError.unexpected.response)
                }
                signedIn.reset = true
                relayed = .json(signedIn)
            }
            context.pool.run(DeleteAnonymousUser(userID: anonymousUserID)) { [context, responder] result in
                if case .failure(let failure) = result {
                    context.logger.log(
                        .warning, "anonymous user left after a sign-in on another shard (ferry cleanup-anonymous)",
                        ["user": anonymousUserID, "error": failure.description])
                }
                responder.respond(relayed)
            }
        }
    }
}
