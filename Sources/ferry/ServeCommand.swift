import FerryCommandLine
import FerryGateway

enum ServeCommand: Command {
    static let name = "serve"
    static let summary = "serve the sync API (production)"
    static let usage = """
        ferry serve [options]   (every option also reads its FERRY_* variable)

        Waits up to --database-wait for the database to answer with Ferry's schema at this
        version or newer (ferry version names it), then serves until SIGTERM or SIGINT.
        Exit status: 0 stopped by a signal, 1 the database was not ready in time (the log says
        what to do) or another failure, 2 bad settings, including an address another process
        serves (unless --share-port).
        """
    static let settings = GatewayConfiguration.settings

    static func run(_ values: SettingValues) throws -> Int32 {
        Gateway.serve(try GatewayConfiguration(values))
    }
}
