import CCurl
import Foundation

/// The operator's SMTP relay (`FERRY_SMTP_URL`), spoken to through libcurl's SMTP
/// support: `smtp://host:port` (STARTTLS when the relay offers it, its certificate
/// verified), `smtps://host:port` (TLS from the start), user and password in the URL
/// when the relay wants them.
///
/// ``send(_:)`` blocks for the whole SMTP conversation (up to ``timeoutSeconds``): call it
/// on a worker thread, never on an event loop. Safe from any thread; each send has its
/// own curl handle.
struct SMTPRelay: Sendable {
    /// The relay's URL as the operator gave it (may hold a password: never logged).
    let url: String
    /// The envelope sender and `From:` address.
    let from: String
    /// Seconds one mail may take, connection included.
    var timeoutSeconds = 30

    /// Why a relay did not take a mail; the text names curl's error and the relay's reply
    /// code, never the URL.
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs libcurl's global set-up once, before the first handle (it is not thread-safe).
    private static let curlIsReady: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

    /// Hands `message` to the relay for `message.recipient`. Blocks.
    func send(_ message: MailMessage) -> Result<Void, Failure> {
        guard Self.curlIsReady, let curl = curl_easy_init() else {
            return .failure(Failure(description: "libcurl could not start"))
        }
        defer { curl_easy_cleanup(curl) }
        let recipients = curl_slist_append(nil, "<\(message.recipient)>")
        defer { curl_slist_free_all(recipients) }
        let upload = Upload(bytes: message.bytes(from: from))
        let uploadPointer = Unmanaged.passRetained(upload)
        defer { uploadPointer.release() }
        var status = ccurl_set_text(curl, CURLOPT_URL, url)
        if status == CURLE_OK { status = ccurl_set_text(curl, CURLOPT_MAIL_FROM, "<\(MailMessage.address(of: from))>") }
        let longs: [(CURLoption, Int)] = [
            (CURLOPT_UPLOAD, 1), (CURLOPT_TIMEOUT, timeoutSeconds), (CURLOPT_NOSIGNAL, 1),
            (CURLOPT_USE_SSL, Int(CURLUSESSL_TRY.rawValue)),
        ]
        for (option, value) in longs where status == CURLE_OK { status = ccurl_set_long(curl, option, value) }
        if status == CURLE_OK { status = ccurl_set_list(curl, CURLOPT_MAIL_RCPT, recipients) }
        if status == CURLE_OK { status = ccurl_set_read_function(curl, Upload.read) }
        if status == CURLE_OK { status = ccurl_set_pointer(curl, CURLOPT_READDATA, uploadPointer.toOpaque()) }
        if status == CURLE_OK { status = curl_easy_perform(curl) }
        guard status == CURLE_OK else {
            let reply = ccurl_response_code(curl)
            let text = String(cString: curl_easy_strerror(status))
            return .failure(Failure(description: reply > 0 ? "\(text) (relay replied \(reply))" : text))
        }
        return .success(())
    }

    /// The bytes curl reads the message from, in order.
    private final class Upload {
        let bytes: [UInt8]
        var offset = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        /// curl's read callback: copies the next bytes into its buffer; 0 at the end.
        static let read: curl_read_callback = { buffer, size, count, context in
            guard let buffer, let context else { return 0 }
            let upload = Unmanaged<Upload>.fromOpaque(context).takeUnretainedValue()
            let length = min(size * count, upload.bytes.count - upload.offset)
            guard length > 0 else { return 0 }
            upload.bytes.withUnsafeBytes { source in
                UnsafeMutableRawPointer(buffer).copyMemory(
                    from: source.baseAddress! + upload.offset, byteCount: length)
            }
            upload.offset += length
            return length
        }
    }
}
