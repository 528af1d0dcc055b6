import FerryTestSupport
import Testing

@testable import FerryHTTP

@Suite(.tagSelection) struct TrustedProxiesTests {
    @Test func addressesReadAndPrintInTheirCanonicalForm() {
        #expect(IPAddress("192.0.2.1")?.description == "192.0.2.1")
        #expect(IPAddress("2001:DB8:0:0::1")?.description == "2001:db8::1")
        #expect(IPAddress("::1")?.description == "::1")
        #expect(IPAddress("::ffff:192.0.2.1") == IPAddress("192.0.2.1"))
        #expect(IPAddress("::ffff:192.0.2.1")?.isIPv4 == true)
        #expect(IPAddress(bytes: [192, 0, 2, 1]) == IPAddress("192.0.2.1"))
        #expect(IPAddress("2001:db8::1")?.bytes.count == 16)
    }

    @Test(arguments: ["", " 192.0.2.1", "192.0.2", "01.2.3.4", "192.0.2.1:80", "[::1]", "::1%lo", "host", "1.2.3.4.5"])
    func textThatIsNoAddressIsRefused(_ text: String) {
        #expect(IPAddress(text) == nil)
    }

    @Test func anIPv6ClientIsLimitedByItsSlash64() {
        #expect(IPAddress("192.0.2.1")?.limitKey == "192.0.2.1")
        #expect(IPAddress("2001:db8:1:2:aaaa::1")?.limitKey == "2001:db8:1:2::/64")
        #expect(IPAddress("2001:db8:1:2:ffff:ffff:ffff:ffff")?.limitKey == "2001:db8:1:2::/64")
        #expect(IPAddress("2001:db8:1:3::1")?.limitKey == "2001:db8:1:3::/64")
        #expect(IPAddress("::ffff:192.0.2.1")?.limitKey == "192.0.2.1")
    }

    @Test func clientAddressesPrintWithTheirPort() {
        #expect(ClientAddress(IPAddress("192.0.2.1")!, port: 80).description == "192.0.2.1:80")
        #expect(ClientAddress(IPAddress("2001:db8::1")!, port: 80).description == "[2001:db8::1]:80")
        #expect(ClientAddress(IPAddress("2001:db8::1")!, port: nil).description == "2001:db8::1")
    }

    @Test func rangesHoldTheirBlock() throws {
        let eight = try AddressRange("10.0.0.0/8")
        #expect(eight.contains(IPAddress("10.255.0.1")!))
        #expect(!eight.contains(IPAddress("11.0.0.0")!))
        #expect(eight.contains(IPAddress("::ffff:10.1.2.3")!))
        #expect(!eight.contains(IPAddress("::a01:203")!))
        let one = try AddressRange("192.0.2.7")
        #expect(one.contains(IPAddress("192.0.2.7")!) && !one.contains(IPAddress("192.0.2.8")!))
        let v6 = try AddressRange("2001:db8::/32")
        #expect(v6.contains(IPAddress("2001:db8:ffff::1")!) && !v6.contains(IPAddress("2001:db9::1")!))
        #expect(try AddressRange("0.0.0.0/0").contains(IPAddress("203.0.113.1")!))
        #expect(!(try AddressRange("0.0.0.0/0").contains(IPAddress("2001:db8::1")!)))
        #expect(try AddressRange("::/0").contains(IPAddress("2001:db8::1")!))
        #expect(try AddressRange("::1/128").contains(IPAddress("::1")!))
        #expect(try AddressRange("10.1.2.2/31").contains(IPAddress("10.1.2.3")!))
    }

    @Test(arguments: [
        "10.0.0.1/8", "10.0.0.0/33", "::1/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/08", "/8", "host/8",
    ])
    func rangesThatAreNoBlockAreRefused(_ text: String) {
        #expect(throws: AddressRange.ParseError.self) { try AddressRange(text) }
    }

    @Test func aBlockWithBitsPastItsPrefixIsRefusedNamingTheBlock() {
        #expect {
            try AddressRange("10.1.2.3/16")
        } throws: { error in
            "\(error)".contains("10.1.0.0/16")
        }
    }

    @Test func listsAreCommaSeparatedWithSpacesAllowed() throws {
        let proxies = try TrustedProxies(parsing: " 10.0.0.0/8 , ::1,192.0.2.7 ")
        #expect(proxies.description == "10.0.0.0/8,::1/128,192.0.2.7/32")
        #expect(proxies.contains(IPAddress("10.9.9.9")!) && proxies.contains(IPAddress("::1")!))
        #expect(!proxies.contains(IPAddress("127.0.0.1")!))
        #expect(try TrustedProxies(parsing: "").isEmpty)
        #expect(throws: AddressRange.ParseError.self) { try TrustedProxies(parsing: "10.0.0.0/8,,::1") }
        #expect(throws: AddressRange.ParseError.self) { try TrustedProxies(parsing: "10.0.0.0/8,") }
    }
}

/// `X-Forwarded-For`, read from trusted proxies only.
@Suite(.tagSelection) struct ForwardedForTests {
    let proxies = try! TrustedProxies(parsing: "10.0.0.0/8, 2001:db8:ffff::/48")
    let proxy = ClientAddress(IPAddress("10.0.0.5")!, port: 40000)

    func client(from connection: ClientAddress, _ fields: String...) -> String? {
        var headers = HTTPHeaders()
        for field in fields { headers.add(name: "X-Forwarded-For", value: field) }
        return proxies.client(of: connection, headers: headers)?.description
    }

    @Test func anUntrustedPeersHeaderIsIgnored() {
        let peer = ClientAddress(IPAddress("203.0.113.9")!, port: 1234)
        #expect(client(from: peer, "192.0.2.1") == "203.0.113.9:1234")
        #expect(client(from: peer, "10.0.0.1, 192.0.2.1") == "203.0.113.9:1234")
    }

    @Test func aTrustedProxysRightMostUntrustedEntryIsTheClient() {
        #expect(client(from: proxy, "192.0.2.1") == "192.0.2.1")
        // What the client wrote itself, left of what the proxy appended, is not believed.
        #expect(client(from: proxy, "198.51.100.66, 192.0.2.1") == "192.0.2.1")
        // Proxies in a chain are passed over.
        #expect(client(from: proxy, "198.51.100.66, 192.0.2.1, 10.1.1.1, 2001:db8:ffff::3") == "192.0.2.1")
        // Several fields are one list, in order.
        #expect(client(from: proxy, "198.51.100.66", "192.0.2.1, 10.1.1.1") == "192.0.2.1")
        #expect(client(from: proxy, "198.51.100.66, 192.0.2.1", "10.1.1.1") == "192.0.2.1")
    }

    @Test func entriesMayCarryPortsAndBrackets() {
        #expect(client(from: proxy, "192.0.2.1:8080") == "192.0.2.1:8080")
        #expect(client(from: proxy, "[2001:db8::1]:8080") == "[2001:db8::1]:8080")
        #expect(client(from: proxy, "[2001:db8::1]") == "2001:db8::1")
        #expect(client(from: proxy, " 2001:db8::1 ") == "2001:db8::1")
    }

    @Test func anEntryThatIsNoAddressStopsAtTheLastTrustedOne() {
        #expect(client(from: proxy, "unknown") == "10.0.0.5:40000")
        #expect(client(from: proxy, "192.0.2.1, _hidden, 10.1.1.1") == "10.1.1.1")
        #expect(client(from: proxy, "") == "10.0.0.5:40000")
        #expect(client(from: proxy, "192.0.2.1,") == "10.0.0.5:40000")
        #expect(client(from: proxy, "192.0.2.1:080") == "10.0.0.5:40000")
        #expect(client(from: proxy, "[192.0.2.1]:80") == "10.0.0.5:40000")
    }

    @Test func onlyTrustedProxiesNamedIsTheLeftMost() {
        #expect(client(from: proxy, "10.2.2.2, 10.1.1.1") == "10.2.2.2")
        #expect(client(from: proxy) == "10.0.0.5:40000")
    }

    @Test func withNoProxyTrustedNothingIsRead() {
        var headers = HTTPHeaders()
        headers.add(name: "X-Forwarded-For", value: "192.0.2.1")
        #expect(TrustedProxies.none.client(of: proxy, headers: headers) == proxy)
    }
}
