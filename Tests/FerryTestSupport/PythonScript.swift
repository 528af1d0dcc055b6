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
    /// after `timeout` seconds (status -1, as for a signal).
    public static func run(arguments: [String], timeout: Double = 90) throws -> (status: Int32, output: String) {
        try ChildProcess.run(
            python.hasPrefix("/") ? python : "/usr/bin/env",
            (python.hasPrefix("/") ? [] : [python]) + ["-u"] + arguments,
            timeout: timeout)
    }
}
