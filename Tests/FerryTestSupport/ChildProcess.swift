import Foundation
import Glibc
import Synchronization

/// A child process for tests that run `ferry` or the Python clients, started with
/// `posix_spawn`.
///
/// Not Foundation's `Process`: on Linux its `run()` lists `/proc/self/fd` to close every
/// inherited descriptor in the child, and copies each entry's whole 256-byte `d_name`,
/// past the end of glibc's buffer. With the ~1,400 descriptors of a full parallel test
/// run that read crossed into an unmapped page and crashed the run (signal 11 in
/// `Process.run`). Here the child closes them with `posix_spawn_file_actions_addclosefrom_np`.
///
/// The child keeps the calling thread's signal mask (as with `Process`: a test thread
/// may block SIGTERM, which `ferry serve` must cope with) and gets its own process group.
public final class ChildProcess: Sendable {
    /// How the child ended.
    public enum Ending: Sendable, Equatable {
        /// It called `exit` with this status.
        case exited(Int32)
        /// A signal ended it.
        case signaled(Int32)

        /// The exit status, or nil when a signal ended it.
        public var exitStatus: Int32? {
            if case .exited(let status) = self { status } else { nil }
        }
    }

    /// The child's process id.
    public let pid: pid_t
    private let ending = Mutex<Ending?>(nil)

    /// Starts `executable` (an absolute path) with `arguments`; standard input is
    /// `/dev/null`, standard output and error go to the files at `output` and `errors`
    /// (created or truncated; `/dev/null` when nil; one file when both name it).
    /// `environment` nil inherits ours.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        output: String? = nil, errors: String? = nil
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        if errors != nil && errors == output {
            // One open file for both, so they share an offset instead of overwriting each other.
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 2, errors ?? "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        }
        guard Self.addCloseFrom(&actions, 3) == 0 else {
            throw ChildProcessError(description: "posix_spawn_file_actions_addclosefrom_np failed")
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer {
            for pointer in argv + (envp ?? []) { free(pointer) }
        }
        var child: pid_t = 0
        let status = argv.withUnsafeBufferPointer { argv in
            if let envp {
                return envp.withUnsafeBufferPointer { envp in
                    posix_spawn(&child, executable, &actions, &attributes, argv.baseAddress!, envp.baseAddress!)
                }
            }
            return posix_spawn(&child, executable, &actions, &attributes, argv.baseAddress!, environ)
        }
        guard status == 0 else {
            throw ChildProcessError(description: "posix_spawn \(executable): \(String(cString: strerror(status)))")
        }
        pid = child
    }

    /// Whether the child still runs (reaping it when it has ended).
    public var isRunning: Bool { reap(blocking: false) == nil }

    /// Waits for the child to end.
    @discardableResult
    public func wait() -> Ending { reap(blocking: true)! }

    /// The inode numbers of the sockets the child holds open (`/proc/<pid>/fd`), by which
    /// the kernel lists them in `/proc/net/tcp`; empty once it ended.
    public var socketInodes: Set<UInt64> {
        let folder = "/proc/\(pid)/fd"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return Set(
            names.compactMap { name in
                guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: folder + "/" + name),
                    target.hasPrefix("socket:["), target.hasSuffix("]")
                else { return nil }
                return UInt64(target.dropFirst("socket:[".count).dropLast())
            })
    }

    /// How the child ended, once it has (nil while it runs).
    public var ended: Ending? { reap(blocking: false) }

    /// Sends `signal` to the child.
    public func send(_ signal: Int32) { kill(pid, signal) }

    /// Waits up to `seconds` for the child to end, then kills it (SIGKILL) and waits.
    /// Returns how it ended and whether it had to be killed.
    public func wait(seconds: Double) -> (ending: Ending, killed: Bool) {
        _ = eventuallyHoldsBlocking(seconds: seconds) { !isRunning }
        if let ending = ended { return (ending, false) }
        send(SIGKILL)
        return (wait(), true)
    }

    /// Runs `executable` with `arguments` and waits (blocking the caller) for it to end;
    /// killed after `timeout` seconds (status -1, as for a signal). Output and errors go to
    /// one file, read once it ended: a pipe that a grandchild holds open could keep a read
    /// from ending. For the independent clients of `Tests/clients/`.
    public static func run(_ executable: String, _ arguments: [String], timeout: Double) throws -> (
        status: Int32, output: String
    ) {
        let outputFile = FileManager.default.temporaryDirectory
            .appendingPathComponent("ferry-client-\(UUID().uuidString).log")
        defer { try? FileManager.default.removeItem(at: outputFile) }
        let child = try ChildProcess(executable, arguments, output: outputFile.path, errors: outputFile.path)
        let (ending, killed) = child.wait(seconds: timeout)
        let text = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
        return killed ? (-1, text + "\n(killed after \(Int(timeout)) s)") : (ending.exitStatus ?? -1, text)
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which the
    /// Glibc module does not import (it is declared for `_GNU_SOURCE` only).
    private static let addCloseFrom: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32 =
        {
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")
            else { fatalError("glibc without posix_spawn_file_actions_addclosefrom_np (2.34 or later needed)") }
            return unsafeBitCast(
                symbol,
                to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
        }()

    private func reap(blocking: Bool) -> Ending? {
        ending.withLock { ending in
            if let ending { return ending }
            var status: Int32 = 0
            var result: pid_t
            repeat {
                result = waitpid(pid, &status, blocking ? 0 : WNOHANG)
            } while result == -1 && errno == EINTR
            guard result == pid else { return nil }
            // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import as macros.
            ending = status & 0x7f == 0 ? .exited((status >> 8) & 0xff) : .signaled(status & 0x7f)
            return ending
        }
    }

    deinit {
        if ending.withLock({ $0 == nil }) {
            kill(pid, SIGKILL)
            _ = reap(blocking: true)
        }
    }
}

/// Why a child process could not start.
public struct ChildProcessError: Error, CustomStringConvertible {
    public var description: String

    /// An error saying `description`.
    public init(description: String) { self.description = description }
}
