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
    public static func path(_ name: String, filePath: String = #filePath) -> String {
        URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("clients/\(name)").path
    }

    /// Runs Python with `arguments` and waits (blocking the caller) for it to end; killed
    /// after `timeout` seconds (status -1). Output goes to a file: a pipe that a
    /// grandchild holds open could keep a read from ending.
    public static func run(arguments: [String], timeout: Double = 90) throws -> (status: Int32, output: String) {
        let outputFile = FileManager.default.temporaryDirectory
            .appendingPathComponent("ferry-python-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: outputFile.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: outputFile) }
        let output = try FileHandle(forWritingTo: outputFile)
        defer { try? output.close() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python.hasPrefix("/") ? python : "/usr/bin/env")
        process.arguments = (python.hasPrefix("/") ? [] : [python]) + ["-u"] + arguments
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        var status: Int32 = -1
        if process.isRunning {
            // SIGKILL: the child inherits the test process's signal mask, which may block SIGTERM.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        } else {
            status = process.terminationStatus
        }
        let text = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
        return (status, status == -1 ? text + "\n(killed after \(Int(timeout)) s)" : text)
    }
}
