import Foundation
import Glibc

/// Runs the independent Python clients under `Tests/clients/`.
public enum PythonScript {
    /// Debian's interpreter, where `python3-httpx` and `python3-websockets` (`make deps`)
    /// are installed; a `python3` earlier on PATH (pyenv, a venv) may lack them.
    public static var python: String {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : "python3"
    }

    /// The path of `Tests/clients/<name>`.
    public static func path(_ name: String) -> String {
        TestRepository.root + "/Tests/clients/" + name
    }

    /// Runs Python with `arguments` and waits (blocking the caller) for it to end; killed
    /// after `timeout` seconds (status -1, as for a signal). Output and errors go to one
    /// file: a pipe that a grandchild holds open could keep a read from ending.
    public static func run(arguments: [String], timeout: Double = 90) throws -> (status: Int32, output: String) {
        let outputFile = FileManager.default.temporaryDirectory
            .appendingPathComponent("ferry-python-\(UUID().uuidString).log")
        defer { try? FileManager.default.removeItem(at: outputFile) }
        let child = try ChildProcess(
            python.hasPrefix("/") ? python : "/usr/bin/env",
            (python.hasPrefix("/") ? [] : [python]) + ["-u"] + arguments,
            output: outputFile.path, errors: outputFile.path)
        let (ending, killed) = child.wait(seconds: timeout)
        let text = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
        return killed ? (-1, text + "\n(killed after \(Int(timeout)) s)") : (ending.exitStatus ?? -1, text)
    }
}
