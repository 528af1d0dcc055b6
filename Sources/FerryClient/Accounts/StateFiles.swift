import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Small files of the state folder, written so that a crash at any instant leaves the
/// old content or the new one, never a mix: a temporary file in the same folder,
/// `fsync`, `rename`, then `fsync` of the folder.
enum StateFiles {
    /// Writes `data` to `path` atomically with permissions `mode` (0600 for secrets).
    static func write(_ data: Data, to path: String, mode: mode_t = 0o600) throws(FerryError) {
        let temporary = path + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw .storage("cannot create \(temporary): \(errnoText())") }
        // The umask must not widen nor narrow what was asked.
        fchmod(descriptor, mode)
        let written = data.withUnsafeBytes { bytes -> Bool in
            var offset = 0
            while offset < bytes.count {
                let count = Foundation.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if count < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                offset += count
            }
            return true
        }
        guard written, fsync(descriptor) == 0 else {
            let reason = errnoText()
            close(descriptor)
            unlink(temporary)
            throw .storage("cannot write \(path): \(reason)")
        }
        close(descriptor)
        guard rename(temporary, path) == 0 else {
            let reason = errnoText()
            unlink(temporary)
            throw .storage("cannot replace \(path): \(reason)")
        }
        let folder = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_CLOEXEC)
        if folder >= 0 {
            fsync(folder)
            close(folder)
        }
    }

    /// What reading `path` gave: its bytes, nothing (no such file), or an error.
    enum Read {
        case present(Data)
        case absent
        case unreadable(String)
    }

    /// Reads `path`, telling "no such file" apart from every other failure.
    static func read(_ path: String) -> Read {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return errno == ENOENT ? .absent : .unreadable("\(path): \(errnoText())") }
        defer { close(descriptor) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = Foundation.read(descriptor, &buffer, buffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                return .unreadable("\(path): \(errnoText())")
            }
            if count == 0 { return .present(data) }
            data.append(contentsOf: buffer[0..<count])
            // The state folder's files are small; a huge one is not ours.
            if data.count > 1 << 20 { return .unreadable("\(path) is larger than 1 MiB") }
        }
    }

    /// Removes `path`; a missing file is fine.
    static func remove(_ path: String) throws(FerryError) {
        guard unlink(path) == 0 || errno == ENOENT else { throw .storage("cannot remove \(path): \(errnoText())") }
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}

/// An advisory lock on a file of the state folder (`flock`), shared by every process
/// that uses the folder: one refresh at a time across an app and its extensions, or
/// several `ferry-demo` processes.
final class FileLock: Sendable {
    private let descriptor: Int32

    private init(descriptor: Int32) { self.descriptor = descriptor }

    /// Takes the lock on `path` (creating the file), waiting at most `timeout` seconds
    /// (polling, so no thread blocks in the kernel); nil when it stayed taken that long.
    static func acquire(_ path: String, timeout: TimeInterval) async -> FileLock? {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return nil }
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return FileLock(descriptor: descriptor) }
            guard errno == EWOULDBLOCK || errno == EINTR, Date() < deadline else {
                close(descriptor)
                return nil
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Releases the lock (closing the file releases it too, as does the process's end).
    func release() { close(descriptor) }
}
