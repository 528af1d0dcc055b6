import FerryTestSupport
import Testing

@testable import FerryHTTP

private func decode(_ chunks: [[UInt8]]) -> [ProxyHeaderDecoder.Event] {
    var decoder = ProxyHeaderDecoder()
    return chunks.map { chunk in chunk.withUnsafeBytes { decoder.decode($0) } }
}

private func decode(_ bytes: [UInt8]) -> ProxyHeaderDecoder.Event { decode([bytes])[0] }
private func decode(_ text: String) -> ProxyHeaderDecoder.Event { decode(Array(text.utf8)) }

private func client(_ ip: String, _ port: Int) -> ClientAddress { ClientAddress(IPAddress(ip)!, port: port) }

private func isInvalid(_ event: ProxyHeaderDecoder.Event) -> Bool {
    if case .invalid = event { return true }
    return false
}

private let request = Array("GET / HTTP/1.1\r\nHost: t\r\n\r\n".utf8)

@Suite(.tagSelection) struct ProxyHeaderDecoderTests {
    // MARK: - Version 1

    @Test func v1TCP4NamesTheClientAndLeavesTheRequestBytes() {
        let header = Array("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n".utf8)
        #expect(
            decode(header + request)
                == .header(
                    ProxyHeader(source: client("192.0.2.1", 56324), destination: client("198.51.100.2", 443)),
                    consumed: header.count))
    }

    @Test func v1TCP6NamesTheClient() {
        let header = "PROXY TCP6 2001:db8::1 2001:db8::2 65535 0\r\n"
        #expect(
            decode(header)
                == .header(
                    ProxyHeader(source: client("2001:db8::1", 65535), destination: client("2001:db8::2", 0)),
                    consumed: header.utf8.count))
    }

    @Test func v1TCP6OfAnIPv4MappedAddressIsTheIPv4Client() {
        guard case .header(let header, _) = decode("PROXY TCP6 ::ffff:192.0.2.9 ::1 1000 80\r\n") else {
            Issue.record("refused")
            return
        }
        #expect(header.source == client("192.0.2.9", 1000))
        #expect(header.source?.ip.isIPv4 == true)
    }

    @Test func v1UnknownSpeaksForTheConnectionWhateverFollowsIt() {
        #expect(decode("PROXY UNKNOWN\r\n") == .header(ProxyHeader(), consumed: 15))
        let long = "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n"
        #expect(decode(long) == .header(ProxyHeader(), consumed: long.utf8.count))
    }

    @Test(arguments: [
        "PROXY TCP4 192.0.2.1  198.51.100.2 1 2\r\n",  // two spaces
        "PROXY TCP4 192.0.2.1 198.51.100.2 1\r\n",  // a port missing
        "PROXY TCP4 192.0.2.1 198.51.100.2 1 2 3\r\n",  // a field too many
        "PROXY TCP4 2001:db8::1 198.51.100.2 1 2\r\n",  // IPv6 under TCP4
        "PROXY TCP6 192.0.2.1 2001:db8::2 1 2\r\n",  // IPv4 under TCP6
        "PROXY TCP4 192.0.2.1 198.51.100.2 65536 2\r\n",  // port out of range
        "PROXY TCP4 192.0.2.1 198.51.100.2 01 2\r\n",  // leading zero
        "PROXY TCP4 192.0.2.1 198.51.100.2 -1 2\r\n",
        "PROXY TCP4 192.0.2.256 198.51.100.2 1 2\r\n",
        "PROXY TCP4 192.0.2 198.51.100.2 1 2\r\n",
        "PROXY TCP4 host 198.51.100.2 1 2\r\n",
        "PROXY UDP4 192.0.2.1 198.51.100.2 1 2\r\n",
        "PROXY tcp4 192.0.2.1 198.51.100.2 1 2\r\n",
        "PROXY \r\n",
        "PROXY TCP4 192.0.2.1 198.51.100.2 1 2\n",  // LF without CR
        "PROXY TCP4 192.0.2.1 198.51.100.2 1 2\rX",  // CR without LF
        "PROXY TCP4 192.0.2.1\t198.51.100.2 1 2\r\n",  // a control byte
    ])
    func v1MalformedIsRefused(_ text: String) {
        #expect(isInvalid(decode(text)))
    }

    @Test func v1UpTo107BytesIsTakenAndLongerIsRefusedWithoutWaiting() {
        let prefix = "PROXY UNKNOWN "
        let exact = prefix + String(repeating: "a", count: 107 - prefix.utf8.count - 2) + "\r\n"
        #expect(exact.utf8.count == 107)
        #expect(decode(exact) == .header(ProxyHeader(), consumed: 107))
        let over = prefix + String(repeating: "a", count: 107 - prefix.utf8.count - 1) + "\r\n"
        #expect(isInvalid(decode(over)))
        // No CR in the first 107 bytes: refused then, however much more follows.
        #expect(isInvalid(decode(prefix + String(repeating: "a", count: 10_000))))
        #expect(isInvalid(decode(prefix + String(repeating: "a", count: 93))))
        #expect(decode(prefix + String(repeating: "a", count: 92)) == .needMoreBytes)
    }

    @Test func v1SplitAcrossReadsIsReadWhole() {
        let header = Array("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n".utf8)
        // One byte a read, then the last with the request behind it.
        var chunks = header.dropLast().map { [$0] }
        chunks.append([header.last!] + request)
        let events = decode(chunks)
        #expect(events.dropLast().allSatisfy { $0 == .needMoreBytes })
        #expect(
            events.last
                == .header(
                    ProxyHeader(source: client("192.0.2.1", 56324), destination: client("198.51.100.2", 443)),
                    consumed: 1))
        // The CR and LF in two reads.
        let split = decode([Array(header.dropLast()), [0x0A] + request])
        #expect(split[0] == .needMoreBytes)
        guard case .header(_, let consumed) = split[1] else {
            Issue.record("refused")
            return
        }
        #expect(consumed == 1)
    }

    // MARK: - Version 2

    @Test func v2ProxyOverIPv4NamesTheClient() {
        let header = ProxyHeaders.v2(
            source: "192.0.2.1", sourcePort: 56324, destination: "198.51.100.2", destinationPort: 443)
        #expect(header.count == 28)
        #expect(
            decode(header + request)
                == .header(
                    ProxyHeader(source: client("192.0.2.1", 56324), destination: client("198.51.100.2", 443)),
                    consumed: 28))
    }

    @Test func v2ProxyOverIPv6NamesTheClient() {
        let header = ProxyHeaders.v2(
            source: "2001:db8::7", sourcePort: 1, destination: "2001:db8::8", destinationPort: 2)
        #expect(header.count == 52)
        #expect(
            decode(header + request)
                == .header(
                    ProxyHeader(source: client("2001:db8::7", 1), destination: client("2001:db8::8", 2)), consumed: 52))
    }

    @Test func v2TLVsAreSkipped() {
        // PP2_TYPE_AUTHORITY "ferry", then PP2_TYPE_NOOP with 3 bytes.
        let tlvs: [UInt8] = [0x02, 0x00, 0x05] + Array("ferry".utf8) + [0x04, 0x00, 0x03, 0, 0, 0]
        let header = ProxyHeaders.v2(
            source: "192.0.2.1", sourcePort: 5, destination: "198.51.100.2", destinationPort: 6, tlvs: tlvs)
        #expect(
            decode(header + request)
                == .header(
                    ProxyHeader(source: client("192.0.2.1", 5), destination: client("198.51.100.2", 6)),
                    consumed: header.count))
    }

    @Test func v2LocalSpeaksForTheConnectionWhateverItsFamily() {
        #expect(
            decode(ProxyHeaders.v2(command: 0x20, family: 0x00, payload: [])) == .header(ProxyHeader(), consumed: 16))
        // haproxy's health checks send LOCAL; the block, family included, is ignored.
        let local = ProxyHeaders.v2(command: 0x20, family: 0xFF, payload: [1, 2, 3])
        #expect(decode(local + request) == .header(ProxyHeader(), consumed: 19))
    }

    @Test func v2UnspecifiedAndUnixFamiliesSpeakForTheConnection() {
        #expect(decode(ProxyHeaders.v2(family: 0x00, payload: [9, 9])) == .header(ProxyHeader(), consumed: 18))
        let unix = ProxyHeaders.v2(family: 0x31, payload: [UInt8](repeating: 0, count: 216))
        #expect(decode(unix) == .header(ProxyHeader(), consumed: 232))
    }

    @Test func v2RefusesWhatTheSpecSaysReceiversMustReject() {
        let addresses = [UInt8](repeating: 1, count: 12)
        #expect(isInvalid(decode(ProxyHeaders.v2(command: 0x11, family: 0x11, payload: addresses))))  // version 1
        #expect(isInvalid(decode(ProxyHeaders.v2(command: 0x31, family: 0x11, payload: addresses))))  // version 3
        #expect(isInvalid(decode(ProxyHeaders.v2(command: 0x22, family: 0x11, payload: addresses))))  // command 2
        #expect(isInvalid(decode(ProxyHeaders.v2(family: 0x41, payload: addresses))))  // family 4
        #expect(isInvalid(decode(ProxyHeaders.v2(family: 0x13, payload: addresses))))  // transport 3
        #expect(isInvalid(decode(ProxyHeaders.v2(family: 0x10, payload: addresses))))  // INET, no transport
        #expect(isInvalid(decode(ProxyHeaders.v2(family: 0x12, payload: addresses))))  // UDP
    }

    @Test func v2AddressesShorterThanTheirFamilyAreRefused() {
        #expect(isInvalid(decode(ProxyHeaders.v2(family: 0x11, payload: [UInt8](repeating: 1, count: 11)))))
        #expect(isInvalid(decode(ProxyHeaders.v2(family: 0x21, payload: [UInt8](repeating: 1, count: 35)))))
        #expect(isInvalid(decode(ProxyHeaders.v2(family: 0x31, payload: [UInt8](repeating: 1, count: 215)))))
    }

    @Test func v2OverTheCapIsRefusedAtItsLengthWithoutWaiting() {
        let cap = ProxyHeaderDecoder.maxV2PayloadBytes
        let atCap = ProxyHeaders.v2(family: 0x00, payload: [UInt8](repeating: 0, count: cap))
        #expect(decode(atCap) == .header(ProxyHeader(), consumed: 16 + cap))
        // Only the 16 bytes that declare one byte more than the cap.
        let over = ProxyHeaders.v2Signature + [0x21, 0x11, UInt8((cap + 1) >> 8), UInt8((cap + 1) & 0xFF)]
        #expect(isInvalid(decode(over)))
        let largest = ProxyHeaders.v2Signature + [0x21, 0x11, 0xFF, 0xFF]
        #expect(isInvalid(decode(largest)))
    }

    @Test func v2TruncatedWaitsForTheRest() {
        let header = ProxyHeaders.v2(
            source: "192.0.2.1", sourcePort: 1, destination: "198.51.100.2", destinationPort: 2)
        #expect(decode(Array(header.prefix(11))) == .needMoreBytes)
        #expect(decode(Array(header.prefix(16))) == .needMoreBytes)
        #expect(decode(Array(header.dropLast())) == .needMoreBytes)
    }

    @Test func v2SplitAcrossReadsIsReadWhole() {
        let header = ProxyHeaders.v2(
            source: "2001:db8::7", sourcePort: 1, destination: "2001:db8::8", destinationPort: 2)
        let events = decode([
            Array(header[0..<5]), Array(header[5..<14]), Array(header[14..<40]), Array(header[40...]) + request,
        ])
        #expect(events.prefix(3).allSatisfy { $0 == .needMoreBytes })
        #expect(
            events[3]
                == .header(
                    ProxyHeader(source: client("2001:db8::7", 1), destination: client("2001:db8::8", 2)),
                    consumed: header.count - 40))
    }

    // MARK: - Neither

    @Test func bytesThatDepartFromBothSignaturesAreNoHeaderAtOnce() {
        #expect(decode(request) == .noHeader)
        #expect(decode("P") == .needMoreBytes)
        #expect(decode("PROXY") == .needMoreBytes)
        #expect(decode("PROXX") == .noHeader)
        // The signature is case-sensitive, as the spec's.
        #expect(decode("proxy TCP4 192.0.2.1 198.51.100.2 1 2\r\n") == .noHeader)
        // `PROXY` not followed by its space is no signature either.
        #expect(decode("PROXYZ / HTTP/1.1\r\n") == .noHeader)
        #expect(decode([0x0D, 0x0A, 0x0D, 0x0A, 0x01]) == .noHeader)
        #expect(decode([0x00]) == .noHeader)
        #expect(decode([0x0D, 0x0A]) == .needMoreBytes)
    }

    /// A request read a byte at a time that begins like a signature (`PROPFIND`, or v2's
    /// leading CRLFs) is handed back whole: the held bytes, then the read that departed.
    @Test func theStartOfASignatureHeldAcrossReadsIsHandedBackWhenItDeparts() {
        for (chunks, earlier) in [
            (["P", "R", "O", "PFIND / HTTP/1.1\r\n"].map { Array($0.utf8) }, Array("PRO".utf8)),
            ([[0x0D, 0x0A], [0x0D, 0x0A, 0x00, 0x0D], Array("GET".utf8)], [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D]),
        ] {
            var decoder = ProxyHeaderDecoder()
            let events = chunks.map { chunk in chunk.withUnsafeBytes { decoder.decode($0) } }
            #expect(events == Array(repeating: .needMoreBytes, count: chunks.count - 1) + [.noHeader])
            #expect(decoder.earlier == earlier)
        }
    }

    /// Once the whole signature is read the connection is committed to a header: what
    /// follows must be one.
    @Test func aWholeSignatureFollowedByNoHeaderIsRefused() {
        #expect(isInvalid(decode("PROXY GET / HTTP/1.1\r\n")))
        #expect(isInvalid(decode(ProxyHeaders.v2Signature + [0x11, 0x11, 0x00, 0x00])))
    }
}
