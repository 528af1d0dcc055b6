import CLibUV

/// An error reported by libuv or by the operating system underneath it.
public struct LoopError: Error, Equatable, CustomStringConvertible {
    /// The negative libuv status code (`UV_ECONNRESET`, …).
    public let code: Int32
    /// What Ferry was doing when it failed (`"bind 127.0.0.1:8080"`).
    public let operation: String

    /// Wraps a libuv status code.
    public init(code: Int32, operation: String) {
        self.code = code
        self.operation = operation
    }

    /// Wraps a POSIX `errno` value.
    public init(errno value: Int32, operation: String) {
        self.init(code: -value, operation: operation)
    }

    /// The libuv error name, e.g. `ECONNRESET`.
    public var name: String { String(cString: uv_err_name(code)) }

    public var description: String { "\(operation): \(name) (\(String(cString: uv_strerror(code))))" }

    /// Throws when `status` is negative.
    @discardableResult
    static func check(_ status: Int32, _ operation: @autoclosure () -> String) throws(LoopError) -> Int32 {
        if status < 0 { throw LoopError(code: status, operation: operation()) }
        return status
    }
}
