import FerryCommandLine
import FerryGateway
import Foundation

@main
enum FerryCLI {
    static var commands: [any Command.Type] {
        [
            ServeCommand.self, DevCommand.self, MigrateCommand.self, CleanupAnonymousCommand.self,
            PurgeTombstonesCommand.self,
            DatabaseCommand.self, VersionCommand.self,
        ]
    }

    static func main() {
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, !name.hasPrefix("-") || name == "--version" else {
            printHelp()
            let askedForHelp = arguments.first.map { ["--help", "-h"].contains($0) } ?? false
            exit(askedForHelp ? ExitStatus.success : ExitStatus.usage)
        }
        arguments.removeFirst()
        if name == "help" { exit(help(arguments)) }
        guard let command = command(named: name == "--version" ? "version" : name) else {
            printError("ferry: unknown command '\(name)' (see ferry help)")
            exit(ExitStatus.usage)
        }
        if arguments.contains("--help") || arguments.contains("-h") {
            printHelp(command)
            exit(ExitStatus.success)
        }
        do {
            let values = try SettingValues(
                command.settings, arguments: arguments, environment: ProcessInfo.processInfo.environment)
            exit(try command.run(values))
        } catch let error as SettingsError {
            printError("ferry \(command.name): \(error)")
            exit(ExitStatus.usage)
        } catch {
            printError("ferry \(command.name): \(error)")
            exit(ExitStatus.failure)
        }
    }

    static func command(named name: String) -> (any Command.Type)? {
        commands.first { $0.name == name }
    }

    /// `ferry help` (every command) and `ferry help <command>` (its usage and settings).
    static func help(_ arguments: [String]) -> Int32 {
        switch arguments.count {
        case 0:
            printHelp()
            return ExitStatus.success
        case 1:
            guard let command = command(named: arguments[0]) else {
                printError("ferry help: unknown command '\(arguments[0])' (see ferry help)")
                return ExitStatus.usage
            }
            printHelp(command)
            return ExitStatus.success
        default:
            printError("ferry help: expected at most one command, e.g. ferry help serve")
            return ExitStatus.usage
        }
    }

    static func printHelp() {
        var text = "ferry: a sync gateway for offline-first apps, on PostgreSQL\n\n"
        text += "usage: ferry <command> [options]\n\ncommands:\n"
        let lines =
            commands.map { ($0.name, $0.summary) } + [
                ("help", "this list, or a command's options: ferry help <command>")
            ]
        let width = lines.map { $0.0.count }.max()! + 2
        for (name, summary) in lines {
            text += "  " + name.padding(toLength: width, withPad: " ", startingAt: 0) + summary + "\n"
        }
        text += "\nRun 'ferry help <command>' (or 'ferry <command> --help') for a command's options and "
        text += "environment variables.\nExit status: 0 done, 1 a failure (printed), 2 bad settings or usage."
        printLine(text)
    }

    static func printHelp(_ command: any Command.Type) {
        printLine("usage: \(command.usage)")
        if !command.settings.isEmpty { printLine("\noptions:\n" + Setting.helpText(command.settings)) }
    }
}
