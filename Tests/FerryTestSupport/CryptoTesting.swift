import CCrypto

/// HMAC-SHA256 computed independently of the code under test, to forge tokens.
public func hmacSHA256(key: String, _ message: String) -> [UInt8] {
    var digest = [UInt8](repeating: 0, count: 32)
    var length: UInt32 = 0
    let key = Array(key.utf8)
    let message = Array(message.utf8)
    _ = HMAC(EVP_sha256(), key, Int32(key.count), message, message.count, &digest, &length)
    return digest
}
