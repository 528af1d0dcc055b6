// ferry-demo: the example apps' tables from a terminal, on FerryClient alone. Two state
// folders are two devices. Its output is for scripts: one JSON value on standard
// output, reasons on standard error, and the exit status says what happened.

import FerryClient
import Foundation

let usage = """
    usage: ferry-demo --server URL --state DIR <command>
      status                      one JSON object: {"user_id", "device_id", "anonymous", "email",
                                  "email_confirmed", "pending_mutations"}
      enqueue TABLE OP JSON       OP insert|upsert|delete (delete: JSON is the key); prints the local row as JSON
      sync                        drain, then pull until up to date; exit 0 only when both succeeded
      show TABLE                  the local rows as one JSON array of objects keyed by column name
      watch --seconds N           hold the stream, sync on cues; a line per sync
      link EMAIL PASSWORD
      confirm CODE | confirm --resend
                                  confirm the linked email with the mailed code, or mail a new one
      signin EMAIL PASSWORD [--resolve keep_cloud|keep_device]
                                  a choice needed: prints {"device_rows", "cloud_rows"} and exits 3
      password CURRENT NEW        change this account's password (other devices must sign in again)
      reset-request EMAIL         mail a password reset code to EMAIL
      reset EMAIL CODE NEW        set EMAIL's password with the mailed code; prints {"signed_in"}
                                  (false: this device holds another account; signin to switch)
      signout | delete-account
      claim TABLE KEY [--force] | heartbeat TABLE KEY | release TABLE KEY
    Any command on a state folder with no session signs up anonymously first.
    Exit status: 0 done, 1 the server refused (the reason on standard error), 2 bad
    arguments, 3 sign-in needs a choice, 4 the server could not be reached (work stays queued).
    Tests only: FERRY_DEMO_FAULT=POINT kills the process (SIGKILL) when it reaches POINT:
      enqueue-between-mutation-and-row, enqueue-committed, push-before-send, push-answered.
    """

/// How ferry-demo ends: the status and what it says on standard error.
struct Exit: Error {
    var status: Int32
    var message: String

    static func badArguments(_ message: String) -> Exit { Exit(status: 2, message: message + "\n" + usage) }
}

func printJSON(_ value: JSONValue) { print(value.jsonText) }

func parseJSON(_ text: String) throws -> JSONValue {
    do { return try JSONValue(json: Data(text.utf8)) } catch { throw Exit.badArguments("not JSON: \(text)") }
}

/// The exit for a FerryClient error.
func exit(for error: any Error) -> Exit {
    guard let error = error as? FerryError else { return Exit(status: 1, message: "\(error)") }
    switch error {
    case .unreachable: return Exit(status: 4, message: error.description)
    case .server where error.isRetryable:
        return Exit(status: 4, message: error.description)
    case .resolutionRequired(let device, let cloud):
        printJSON(["device_rows": .integer(Int64(device)), "cloud_rows": .integer(Int64(cloud))])
        return Exit(status: 3, message: "sign-in needs a choice: --resolve keep_cloud or keep_device")
    case .lockHeld(let holder, let age):
        let milliseconds = age.map { String(Int64(($0 * 1000).rounded())) } ?? "null"
        return Exit(status: 1, message: "lock_held holder=\(holder ?? "null") heartbeat_age_ms=\(milliseconds)")
    case .lockLost(let holder): return Exit(status: 1, message: "lock_lost holder=\(holder ?? "null")")
    case .outboxNotEmpty: return Exit(status: 4, message: error.description)
    case .local(.unknownTable), .local(.missingKey), .local(.readOnlyTable):
        return Exit.badArguments(error.description)
    default: return Exit(status: 1, message: error.description)
    }
}

func run(_ arguments: [String]) async throws {
    if let fault = ProcessInfo.processInfo.environment["FERRY_DEMO_FAULT"], !FaultPoint.arm(fault) {
        throw Exit.badArguments("FERRY_DEMO_FAULT names no fault point: \(fault)")
    }
    var rest = arguments
    var server: URL?
    var state: URL?
    while let first = rest.first, first.hasPrefix("--") {
        rest.removeFirst()
        guard let value = rest.first else { throw Exit.badArguments("\(first) needs a value") }
        rest.removeFirst()
        switch first {
        case "--server":
            guard let url = URL(string: value), url.scheme == "http" || url.scheme == "https" else {
                throw Exit.badArguments("--server must be an http(s) URL")
            }
            server = url
        case "--state": state = URL(fileURLWithPath: value)
        default: throw Exit.badArguments("unknown option \(first)")
        }
    }
    guard let server, let state else { throw Exit.badArguments("--server and --state are needed") }
    guard let command = rest.first else { throw Exit.badArguments("no command") }
    let operands = Array(rest.dropFirst())
    func expect(_ count: Int) throws {
        guard operands.count == count else { throw Exit.badArguments("\(command) takes \(count) arguments") }
    }
    let known = [
        "status", "enqueue", "sync", "show", "watch", "link", "confirm", "signin", "password", "reset-request",
        "reset",
        "signout", "delete-account", "claim", "heartbeat", "release",
    ]
    guard known.contains(command) else { throw Exit.badArguments("unknown command \(command)") }

    var configuration = FerryClient.Configuration()
    // Only watch holds the stream and syncs in the background; every other command does
    // its one thing and exits.
    configuration.syncsAutomatically = command == "watch"
    configuration.requestTimeout = 15
    let ferry = try await FerryClient(server: server, stateDirectory: state, configuration: configuration)

    switch command {
    case "status":
        try expect(0)
        guard let user = ferry.user else { throw Exit(status: 1, message: "signed out") }
        printJSON([
            "user_id": .string(user.id), "device_id": .string(user.deviceID), "anonymous": .bool(user.isAnonymous),
            "email": user.email.map(JSONValue.string) ?? .null, "email_confirmed": .bool(user.isEmailConfirmed),
            "pending_mutations": .integer(Int64(ferry.status.pendingMutations)),
        ])

    case "enqueue":
        try expect(3)
        guard let operation = FerryOperation(rawValue: operands[1]) else {
            throw Exit.badArguments("OP is insert, upsert or delete")
        }
        guard case .object(let row) = try parseJSON(operands[2]) else {
            throw Exit.badArguments("JSON must be an object")
        }
        printJSON(.object(try ferry.enqueue(operation, into: operands[0], row)))

    case "sync":
        try expect(0)
        let events = ferry.events()
        let collected = Task {
            var rejected: [RejectedMutation] = []
            for await event in events {
                if case .mutationRejected(let mutation) = event { rejected.append(mutation) }
            }
            return rejected
        }
        var failure: (any Error)?
        do { try await ferry.sync() } catch { failure = error }
        await ferry.close()
        collected.cancel()
        let rejected = await collected.value
        if let failure { throw failure }
        if !rejected.isEmpty {
            let reasons = rejected.map {
                "mutation \($0.id) (\($0.op.rawValue) into \($0.table)) rejected: \($0.code): \($0.message)"
            }
            throw Exit(status: 1, message: reasons.joined(separator: "\n"))
        }

    case "show":
        try expect(1)
        printJSON(.array(try ferry.rows(in: operands[0]).map(JSONValue.object)))

    case "watch":
        guard operands.count == 2, operands[0] == "--seconds", let seconds = Double(operands[1]), seconds >= 0 else {
            throw Exit.badArguments("watch takes --seconds N")
        }
        // A line per pull that reached the end: {"synced_at", "tables", "pending_mutations"}.
        let events = ferry.events()
        let printer = Task {
            var synced = 0
            for await event in events {
                switch event {
                case .pulled(let tables):
                    synced += 1
                    printJSON([
                        "synced_at": .string(ISO8601DateFormatter().string(from: Date())),
                        "tables": .array(tables.sorted().map(JSONValue.string)),
                        "pending_mutations": .integer(Int64(ferry.status.pendingMutations)),
                    ])
                    fflush(nil)
                case .mutationRejected(let mutation):
                    FileHandle.standardError.write(
                        Data(
                            "ferry-demo: mutation \(mutation.id) rejected: \(mutation.code): \(mutation.message)\n".utf8
                        ))
                default: continue
                }
            }
            return synced
        }
        try await Task.sleep(for: .seconds(seconds))
        await ferry.close()
        printer.cancel()
        if await printer.value == 0, let error = ferry.status.lastError { throw error }

    case "link":
        try expect(2)
        try await ferry.link(email: operands[0], password: operands[1])

    case "confirm":
        try expect(1)
        if operands[0] == "--resend" {
            try await ferry.resendConfirmation()
        } else {
            try await ferry.confirmEmail(code: operands[0])
        }

    case "signin":
        guard operands.count == 2 || (operands.count == 4 && operands[2] == "--resolve") else {
            throw Exit.badArguments("signin takes EMAIL PASSWORD [--resolve keep_cloud|keep_device]")
        }
        var choice: SignInChoice?
        if operands.count == 4 {
            guard let parsed = SignInChoice(rawValue: operands[3]) else {
                throw Exit.badArguments("--resolve is keep_cloud or keep_device")
            }
            choice = parsed
        }
        try await ferry.signIn(email: operands[0], password: operands[1], choice: choice)

    case "password":
        try expect(2)
        try await ferry.changePassword(current: operands[0], to: operands[1])

    case "reset-request":
        try expect(1)
        try await ferry.requestPasswordReset(email: operands[0])

    case "reset":
        try expect(3)
        let signedIn = try await ferry.resetPassword(email: operands[0], code: operands[1], newPassword: operands[2])
        printJSON(["signed_in": .bool(signedIn)])

    case "signout":
        try expect(0)
        await ferry.signOut()

    case "delete-account":
        try expect(0)
        try await ferry.deleteAccount()

    case "claim":
        guard operands.count == 2 || (operands.count == 3 && operands[2] == "--force") else {
            throw Exit.badArguments("claim takes TABLE KEY [--force]")
        }
        let claim = try await ferry.claimLock(table: operands[0], key: operands[1], force: operands.count == 3)
        printJSON(["holder": .string(claim.holder), "heartbeat_at": .string(claim.heartbeatAt)])

    case "heartbeat":
        try expect(2)
        try await ferry.heartbeatLock(table: operands[0], key: operands[1])

    case "release":
        try expect(2)
        try await ferry.releaseLock(table: operands[0], key: operands[1])

    default:
        throw Exit.badArguments("unknown command \(command)")
    }
    await ferry.close()
}

do {
    try await run(Array(CommandLine.arguments.dropFirst()))
} catch let failure as Exit {
    FileHandle.standardError.write(Data("ferry-demo: \(failure.message)\n".utf8))
    exit(failure.status)
} catch {
    let failure = exit(for: error)
    FileHandle.standardError.write(Data("ferry-demo: \(failure.message)\n".utf8))
    exit(failure.status)
}
