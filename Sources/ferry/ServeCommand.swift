import FerryGateway

enum ServeCommand: Command {
    static let name = "serve"
    static let summary = "serve the sync API (production)"
    static let usage = "ferry serve [options]   (every option also reads its FERRY_* variable)"
    static let settings = GatewayConfiguration.settings

    static func run(_ values: SettingValues) throws -> Int32 {
        Gateway.serve(try GatewayConfiguration(values))
    }
}
