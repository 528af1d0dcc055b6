import Foundation

/// Runs the independent Node clients under `Tests/clients/` (`*.mjs`; Node 18 or later,
/// whose `fetch` is built in, so no npm package is needed).
public enum NodeScript {
    /// Debian's `nodejs` (`make deps`), else `node` on PATH.
    public static var node: String {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/node") ? "/usr/bin/node" : "node"
    }

    /// The path of `Tests/clients/<name>`.
    public static func path(_ name: String) -> String {
        PythonScript.path(name)
    }

    /// Runs Node with `arguments` and waits (blocking the caller) for it to end; killed
    /// after `timeout` seconds (status -1, as for a signal).
    public static func run(arguments: [String], timeout: Double = 90) throws -> (status: Int32, output: String) {
        try ChildProcess.run(
            node.hasPrefix("/") ? node : "/usr/bin/env", (node.hasPrefix("/") ? [] : [node]) + arguments,
            timeout: timeout)
    }
}
