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
        guard let command = commands.first(where: { $0.name == name || (name == "--version" && $0.name == "version") })
        else {
            printError("ferry: unknown command '\(name)' (see ferry --help)")
            exit(ExitStatus.usage)
        }
        if arguments.contains("--help") || arguments.contains("-h") {
            printLine("usage: \(command.usage)")
            if !command.settings.isEmpty { printLine("\noptions:\n" + Setting.helpText(command.settings)) }
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

    static func printHelp() {
        var text = "ferry: a sync gateway for offline-first apps, on PostgreSQL\n\n"
        text += "usage: ferry <command> [options]\n\ncommands:\n"
        let width = commands.map { $0.name.count }.max()! + 2
        for command in commands {
            text += "  " + command.name.padding(toLength: width, withPad: " ", startingAt: 0) + command.summary + "\n"
        }
        text += "\nRun 'ferry <command> --help' for a command's options and environment variables."
        printLine(text)
    }
}
