/// A program made of commands (`ferry serve`, `ferry-load idle`, …): it picks the command
/// the first argument names, resolves the command's settings from the other arguments
/// and the environment, runs it, and prints the help that the same tables describe.
/// Exit statuses are ``ExitStatus``'s: a bad command line or setting is 2 whatever the
/// command.
public struct CommandLineTool {
    /// The program's name (`ferry`), which starts every line it prints about itself.
    public let name: String
    /// The first line of the help: what the program is.
    public let summary: String
    /// Its commands, in the order the help lists them.
    public let commands: [any Command.Type]
    /// Flags that stand for a command (`--version` for `version`).
    public let aliases: [String: String]

    /// A program called `name` with `commands`.
    public init(name: String, summary: String, commands: [any Command.Type], aliases: [String: String] = [:]) {
        self.name = name
        self.summary = summary
        self.commands = commands
        self.aliases = aliases
    }

    /// Runs the command `arguments` (without the program's own path) name, with
    /// `environment`, and returns the exit status.
    public func run(_ arguments: [String], environment: [String: String]) -> Int32 {
        var arguments = arguments
        guard let word = arguments.first, !word.hasPrefix("-") || aliases[word] != nil else {
            printHelp()
            let askedForHelp = arguments.first.map { ["--help", "-h"].contains($0) } ?? false
            return askedForHelp ? ExitStatus.success : ExitStatus.usage
        }
        arguments.removeFirst()
        if word == "help" { return help(arguments) }
        guard let command = command(named: aliases[word] ?? word) else {
            printError("\(name): unknown command '\(word)' (see \(name) help)")
            return ExitStatus.usage
        }
        if arguments.contains("--help") || arguments.contains("-h") {
            printHelp(command)
            return ExitStatus.success
        }
        do {
            let values = try SettingValues(command.settings, arguments: arguments, environment: environment)
            return try command.run(values)
        } catch let error as SettingsError {
            printError("\(name) \(command.name): \(error)")
            return ExitStatus.usage
        } catch {
            printError("\(name) \(command.name): \(error)")
            return ExitStatus.failure
        }
    }

    /// The command called `name`.
    public func command(named name: String) -> (any Command.Type)? {
        commands.first { $0.name == name }
    }

    /// `<name> help` (every command) and `<name> help <command>` (its usage and settings).
    func help(_ arguments: [String]) -> Int32 {
        switch arguments.count {
        case 0:
            printHelp()
            return ExitStatus.success
        case 1:
            guard let command = command(named: arguments[0]) else {
                printError("\(name) help: unknown command '\(arguments[0])' (see \(name) help)")
                return ExitStatus.usage
            }
            printHelp(command)
            return ExitStatus.success
        default:
            printError("\(name) help: expected at most one command, e.g. \(name) help \(commands[0].name)")
            return ExitStatus.usage
        }
    }

    /// The list of commands.
    func printHelp() {
        var text = "\(summary)\n\n"
        text += "usage: \(name) <command> [options]\n\ncommands:\n"
        let lines =
            commands.map { ($0.name, $0.summary) } + [
                ("help", "this list, or a command's options: \(name) help <command>")
            ]
        let width = lines.map { $0.0.count }.max()! + 2
        for (name, summary) in lines {
            text += "  " + name + String(repeating: " ", count: width - name.count) + summary + "\n"
        }
        text += "\nRun '\(name) help <command>' (or '\(name) <command> --help') for a command's options and "
        text += "environment variables.\nExit status: 0 done, 1 a failure (printed), 2 bad settings or usage."
        printLine(text)
    }

    /// One command's usage and settings.
    func printHelp(_ command: any Command.Type) {
        printLine("usage: \(command.usage)")
        if !command.settings.isEmpty { printLine("\noptions:\n" + Setting.helpText(command.settings)) }
    }
}
