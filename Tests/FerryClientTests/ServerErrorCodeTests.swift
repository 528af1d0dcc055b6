import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// The protocol's error codes as the SDK hands them to an app: typed
/// (``ServerError/Code``), and retryable by their status.
@Suite(.hangLimit, .tagSelection) struct ServerErrorCodeTests {
    /// An error answer as the gateway writes it.
    func answer(_ status: Int, _ code: String, retryable: Bool) -> GatewayAnswer {
        GatewayAnswer(
            status: status,
            body: .object([
                "error": .object(["code": .string(code), "message": .string("m"), "retryable": .bool(retryable)])
            ]))
    }

    @Test func theShardCodesAre503sRetriedWithBackoff() {
        for (code, typed) in [
            ("directory_unavailable", ServerError.Code.directoryUnavailable), ("shard_unavailable", .shardUnavailable),
        ] {
            let error = FerryError.server(answer(503, code, retryable: true).error)
            #expect(error.errorCode == typed)
            #expect(error.isRetryable)
            #expect(SyncEngine.isRetriedLater(error))
        }
        // A 503 is retried whatever its body says (a proxy's page has none).
        #expect(FerryError.server(answer(503, "shard_unavailable", retryable: false).error).isRetryable)
    }

    @Test func emailInUseIsFinal() {
        let error = FerryError.server(answer(409, "email_in_use", retryable: false).error)
        #expect(error.errorCode == .emailInUse)
        #expect(!error.isRetryable)
    }

    @Test func keepDeviceAcrossShardsIsFinal() {
        let error = FerryError.server(answer(409, "keep_device_across_shards", retryable: false).error)
        #expect(error.errorCode == .keepDeviceAcrossShards)
        #expect(!error.isRetryable)
    }

    @Test func aCodeTheSDKDoesNotNameIsStillACodeOfItsText() {
        let error = FerryError.server(answer(409, "a_newer_code", retryable: false).error)
        #expect(error.errorCode == ServerError.Code(rawValue: "a_newer_code"))
        #expect(error.errorCode != .conflict)
        #expect(FerryError.signedOut.errorCode == nil)
        // A body that is no error object names its status.
        #expect(GatewayAnswer(status: 502, body: nil).error.errorCode == "http_502")
    }

    /// Against a real gateway: another account's email, and a directory that does not answer.
    @Test func aLinkAnswersItsTypedCode() async throws {
        try await DemoGateway.with { gateway in
            let first = try await client(gateway, gateway.device("first"), automatic: false, stream: false)
            let second = try await client(gateway, gateway.device("second"), automatic: false, stream: false)
            try await first.link(email: "gil@example.com", password: "correct horse battery")
            do {
                try await second.link(email: "gil@example.com", password: "correct horse battery")
                Issue.record("linked an email another account has")
            } catch let error as FerryError {
                #expect(error.errorCode == .emailInUse, "\(error)")
                #expect(!error.isRetryable)
            }
            #expect(second.user?.isAnonymous == true)
            await first.close()
            await second.close()
        }
        let closed = try freePort()
        let directory = "postgresql://ferry_gateway@127.0.0.1:\(closed)/ferry_directory?connect_timeout=2"
        try await DemoGateway.with(environment: ["FERRY_DIRECTORY_DATABASE_URL": directory]) { gateway in
            let ferry = try await client(gateway, gateway.device("phone"), automatic: false, stream: false)
            do {
                try await ferry.link(email: "hal@example.com", password: "correct horse battery")
                Issue.record("linked with the directory down")
            } catch let error as FerryError {
                #expect(error.errorCode == .directoryUnavailable, "\(error)")
                #expect(error.isRetryable)
            }
            #expect(ferry.user?.isAnonymous == true)
            await ferry.close()
        }
    }
}
