import FerryTestSupport
import Testing

@testable import FerryGateway
@testable import FerryHTTP

/// What the per-address limits count a request under (``Accounts/clientKey(_:)``).
@Suite(.tagSelection) struct ClientKeyTests {
    func key(_ ip: String, port: Int?) -> String {
        Accounts.clientKey(
            HTTPRequest(
                method: .post, path: "/v1/auth/anonymous", remoteAddress: ClientAddress(IPAddress(ip)!, port: port)))
    }

    @Test func anIPv4ClientIsItsAddressWhateverItsPort() {
        #expect(key("192.0.2.1", port: 1) == "192.0.2.1")
        #expect(key("192.0.2.1", port: 65535) == "192.0.2.1")
        #expect(key("192.0.2.1", port: nil) == "192.0.2.1")
        #expect(key("::ffff:192.0.2.1", port: 9) == "192.0.2.1")
    }

    @Test func anIPv6ClientIsItsSlash64WhateverItsPort() {
        // The last colon is no port's: a key cut there would split ::1 and 2001:db8::1 wrong.
        #expect(key("2001:db8:1:2::1", port: 443) == "2001:db8:1:2::/64")
        #expect(key("2001:db8:1:2:dead:beef:0:1", port: nil) == "2001:db8:1:2::/64")
        #expect(key("2001:db8:1:3::1", port: 443) == "2001:db8:1:3::/64")
        #expect(key("::1", port: 80) == "::/64")
    }

    @Test func aPROXYNamedClientKeysAsThatClient() {
        var decoder = ProxyHeaderDecoder()
        let header = ProxyHeaders.v1(source: "2001:db8:7:7::9", sourcePort: 5, destination: "::1", destinationPort: 80)
        guard case .header(let named, _) = header.withUnsafeBytes({ decoder.decode($0) }) else {
            Issue.record("refused")
            return
        }
        let request = HTTPRequest(method: .get, path: "/", remoteAddress: named.source)
        #expect(Accounts.clientKey(request) == "2001:db8:7:7::/64")
    }

    @Test func anUnknownClientIsOneKey() {
        #expect(Accounts.clientKey(HTTPRequest(method: .get, path: "/")) == "unknown")
    }
}
