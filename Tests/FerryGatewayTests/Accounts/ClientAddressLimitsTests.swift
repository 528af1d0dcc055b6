import FerryTestSupport
import Foundation
import Testing

/// The per-address limits behind a trusted proxy: they count the client its PROXY
/// header names (or, without one, its `X-Forwarded-For`), and nothing an untrusted peer
/// sends changes whom they count.
@Suite(.hangLimit, .tags(.database), .tagSelection) struct ClientAddressLimitsTests {
    static let arguments = ["--trusted-proxies", "127.0.0.2", "--anonymous-signups-per-hour", "2"]

    func signUp(
        _ harness: AccountsGateway, as client: String? = nil, from source: String, headers: [(String, String)] = []
    )
        async throws -> APIResponse
    {
        let header = client.map {
            ProxyHeaders.v2(
                source: $0, sourcePort: 40000, destination: $0.contains(":") ? "::1" : "127.0.0.1", destinationPort: 443
            )
        }
        return try await FerryTestSupport.call(
            "POST", "/v1/auth/anonymous", port: harness.port, json: ["device_id": UUID().uuidString],
            headers: headers, source: source, proxyHeader: header)
    }

    @Test func eachClientBehindTheProxyHasItsOwnSignUps() async throws {
        try await withAccountsGateway(arguments: Self.arguments) { harness in
            for _ in 0..<2 {
                #expect(try await signUp(harness, as: "192.0.2.1", from: "127.0.0.2").status == 201)
            }
            let spent = try await signUp(harness, as: "192.0.2.1", from: "127.0.0.2")
            #expect(spent.status == 429, "\(spent)")
            let other = try await signUp(harness, as: "192.0.2.2", from: "127.0.0.2")
            #expect(other.status == 201, "another client behind the same proxy: \(other)")
            // The proxy's own address was never counted.
            #expect(try await signUp(harness, as: "127.0.0.2", from: "127.0.0.2").status == 201)
            #expect(try await harness.database.value("select count(*) from ferry.users") == "4")
        }
    }

    @Test func anIPv6ClientsSlash64IsOneClient() async throws {
        try await withAccountsGateway(arguments: Self.arguments) { harness in
            #expect(try await signUp(harness, as: "2001:db8:1:2::1", from: "127.0.0.2").status == 201)
            #expect(try await signUp(harness, as: "2001:db8:1:2::2", from: "127.0.0.2").status == 201)
            let sameBlock = try await signUp(harness, as: "2001:db8:1:2:ffff::3", from: "127.0.0.2")
            #expect(sameBlock.status == 429, "a new address in the same /64: \(sameBlock)")
            #expect(try await signUp(harness, as: "2001:db8:1:3::1", from: "127.0.0.2").status == 201)
        }
    }

    @Test func anUntrustedPeerCannotChooseWhomItsLimitsCount() async throws {
        try await withAccountsGateway(arguments: Self.arguments) { harness in
            // X-Forwarded-For from anyone but a proxy is not read.
            for spoofed in ["192.0.2.10", "192.0.2.11"] {
                let response = try await signUp(harness, from: "127.0.0.3", headers: [("X-Forwarded-For", spoofed)])
                #expect(response.status == 201, "\(response)")
            }
            let third = try await signUp(harness, from: "127.0.0.3", headers: [("X-Forwarded-For", "192.0.2.12")])
            #expect(third.status == 429, "\(third)")
            // A PROXY header from anyone but a proxy is bad HTTP, and counts nothing.
            let proxied = try await signUp(harness, as: "192.0.2.13", from: "127.0.0.3")
            #expect(proxied.status == 400, "\(proxied)")
            #expect(try await harness.database.value("select count(*) from ferry.users") == "2")
        }
    }

    /// A trusted peer that starts with no PROXY header (a gateway forwarding a sign-in)
    /// is whom its `X-Forwarded-For` names, or itself without one.
    @Test func aTrustedPeerWithoutAHeaderIsWhomItsForwardedForNames() async throws {
        try await withAccountsGateway(arguments: Self.arguments) { harness in
            let forwarded = [("X-Forwarded-For", "192.0.2.20")]
            for _ in 0..<2 {
                #expect(try await signUp(harness, from: "127.0.0.2", headers: forwarded).status == 201)
            }
            let spent = try await signUp(harness, from: "127.0.0.2", headers: forwarded)
            #expect(spent.status == 429, "the named client's sign-ups are spent: \(spent)")
            // The proxy's own address, and the client's through a PROXY header, are other clients.
            #expect(try await signUp(harness, from: "127.0.0.2").status == 201)
            let proxied = try await signUp(harness, as: "192.0.2.21", from: "127.0.0.2", headers: forwarded)
            #expect(proxied.status == 201, "a header's client's X-Forwarded-For is its own writing: \(proxied)")
            #expect(try await harness.database.value("select count(*) from ferry.users") == "4")
        }
    }
}
