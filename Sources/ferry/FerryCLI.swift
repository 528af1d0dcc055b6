import FerryCommandLine
import Foundation

@main
enum FerryCLI {
    static var tool: CommandLineTool {
        CommandLineTool(
            name: "ferry", summary: "ferry: a sync gateway for offline-first apps, on PostgreSQL",
            commands: [
                ServeCommand.self, DevCommand.self, MigrateCommand.self, CleanupAnonymousCommand.self,
                PurgeTombstonesCommand.self, RestoreFinishCommand.self, DirectoryBackfillCommand.self,
                DatabaseCommand.self,
                VersionCommand.self,
            ],
            aliases: ["--version": "version"])
    }

    static func main() {
        exit(tool.run(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment))
    }
}
