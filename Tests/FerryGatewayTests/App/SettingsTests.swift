import FerryCommandLine
import FerryGateway
import FerryHTTP
import FerryTestSupport
import Testing

/// Flags, `FERRY_*` variables and their errors, as `ferry serve` reads them.
@Suite(.tagSelection) struct SettingsTests {
    /// The smallest environment `ferry serve` accepts.
    static let environment = [
        "FERRY_DATABASE_URL": "postgresql://ferry_gateway@127.0.0.1:5432/app",
        "FERRY_JWT_SECRET": String(repeating: "s", count: 32),
    ]

    func configuration(_ arguments: [String], environment: [String: String] = environment) throws
        -> GatewayConfiguration
    {
        try GatewayConfiguration(
            SettingValues(GatewayConfiguration.settings, arguments: arguments, environment: environment))
    }

    @Test func defaultsFillWhatIsNotGiven() throws {
        let configuration = try configuration([])
        #expect(configuration.host == "0.0.0.0")
        #expect(configuration.port == 8080)
        #expect(configuration.listenDatabaseURL == configuration.databaseURL)
        #expect(configuration.logFormat == .text)
        #expect(configuration.preparesStatements)
        #expect(configuration.sharedPullCache)
    }

    @Test func theSharedPullCacheIsOnOrOff() throws {
        #expect(
            try !configuration([], environment: Self.environment.merging(["FERRY_SHARED_PULL_CACHE": "off"]) { $1 })
                .sharedPullCache)
        let error = #expect(throws: SettingsError.self) { try configuration(["--shared-pull-cache", "maybe"]) }
        #expect(error?.description.contains("FERRY_SHARED_PULL_CACHE") == true, "\(String(describing: error))")
    }

    @Test func theSharedPullWaitIsBounded() throws {
        #expect(try configuration([]).sharedPullWaitMilliseconds == 1_000)
        #expect(try configuration(["--shared-pull-wait-ms", "30000"]).sharedPullWaitMilliseconds == 30_000)
        let error = #expect(throws: SettingsError.self) { try configuration(["--shared-pull-wait-ms", "0"]) }
        #expect(error?.description.contains("FERRY_SHARED_PULL_WAIT_MS") == true, "\(String(describing: error))")
    }

    @Test func preparedStatementsAreOnOrOff() throws {
        #expect(
            try !configuration([], environment: Self.environment.merging(["FERRY_PREPARED_STATEMENTS": "off"]) { $1 })
                .preparesStatements)
        #expect(try configuration(["--prepared-statements", "on"]).preparesStatements)
        let error = #expect(throws: SettingsError.self) { try configuration(["--prepared-statements", "no"]) }
        #expect(error?.description.contains("FERRY_PREPARED_STATEMENTS") == true, "\(String(describing: error))")
    }

    @Test func flagsWinOverEnvironmentVariables() throws {
        var environment = Self.environment
        environment["FERRY_LISTEN"] = "127.0.0.1:9000"
        environment["FERRY_POOL_SIZE"] = "3"
        let configuration = try configuration(["--listen", "[::1]:9001", "--pool-size=5"], environment: environment)
        #expect(configuration.host == "::1")
        #expect(configuration.port == 9001)
        #expect(configuration.poolSize == 5)
    }

    @Test func readReplicasAreACommaSeparatedListOfPostgresURLs() throws {
        #expect(try configuration([]).readDatabaseURLs.isEmpty)
        #expect(try configuration([]).replicaWaitMilliseconds == 200)
        var environment = Self.environment
        environment["FERRY_READ_DATABASE_URL"] = "postgresql://ferry_gateway@r1/app, postgres://ferry_gateway@r2/app"
        environment["FERRY_REPLICA_WAIT_MS"] = "0"
        let replicated = try configuration([], environment: environment)
        #expect(
            replicated.readDatabaseURLs == ["postgresql://ferry_gateway@r1/app", "postgres://ferry_gateway@r2/app"])
        #expect(replicated.replicaWaitMilliseconds == 0)
        let error = #expect(throws: SettingsError.self) {
            try configuration(["--read-database-url", "postgresql://ferry_gateway@r1/app,r2:5432"])
        }
        #expect(error?.description.contains("--read-database-url / FERRY_READ_DATABASE_URL") == true)
        #expect(throws: SettingsError.self) { try configuration(["--replica-wait-ms", "60001"]) }
    }

    @Test func missingSettingNamesTheFlagAndTheVariable() {
        let error = #expect(throws: SettingsError.self) {
            try configuration([], environment: ["FERRY_JWT_SECRET": String(repeating: "s", count: 32)])
        }
        #expect(error?.description.contains("FERRY_DATABASE_URL") == true)
        #expect(error?.description.contains("--database-url") == true)
    }

    @Test func invalidNumberNamesTheSettingAndTheRange() {
        let error = #expect(throws: SettingsError.self) { try configuration(["--threads", "many"]) }
        #expect(error?.description.contains("--threads / FERRY_THREADS") == true)
        #expect(error?.description.contains("many") == true)
        #expect(throws: SettingsError.self) { try configuration(["--pool-size", "0"]) }
    }

    @Test func aStreamMayNotQueueMoreThanAnyConnection() throws {
        #expect(try configuration([]).maxUnsentBytes == 256 << 10)
        let error = #expect(throws: SettingsError.self) {
            try configuration(["--max-unsent-bytes", "65536", "--stream-max-unsent-bytes", "65537"])
        }
        #expect(error?.description.contains("--stream-max-unsent-bytes / FERRY_STREAM_MAX_UNSENT_BYTES") == true)
        #expect(error?.description.contains("--max-unsent-bytes / FERRY_MAX_UNSENT_BYTES (65536)") == true)
        #expect(try configuration(["--max-unsent-bytes", "65536"]).streamMaxUnsentBytes == 65536)
    }

    @Test func trustedProxiesAreCIDRBlocksCheckedAtStart() throws {
        #expect(try configuration([]).trustedProxies.isEmpty)
        var environment = Self.environment
        environment["FERRY_TRUSTED_PROXIES"] = "10.0.0.0/8, 2001:db8::/32,127.0.0.1"
        #expect(
            try configuration([], environment: environment).trustedProxies.description
                == "10.0.0.0/8,2001:db8::/32,127.0.0.1/32")
        for bad in ["10.0.0.1/8", "10.0.0.0/33", "haproxy", "10.0.0.0/8,,::1"] {
            let error = #expect(throws: SettingsError.self) { try configuration(["--trusted-proxies", bad]) }
            #expect(error?.description.contains("--trusted-proxies / FERRY_TRUSTED_PROXIES") == true)
        }
        let error = #expect(throws: SettingsError.self) { try configuration(["--trusted-proxies", "10.0.0.1/8"]) }
        #expect(error?.description.contains("10.0.0.0/8") == true)
    }

    @Test func unknownFlagIsAnError() {
        let error = #expect(throws: SettingsError.self) { try configuration(["--no-such-flag", "1"]) }
        #expect(error?.description == "unknown option --no-such-flag (see --help)")
    }

    @Test func flagWithoutItsValueIsAnError() {
        let error = #expect(throws: SettingsError.self) { try configuration(["--listen"]) }
        #expect(error?.description == "option --listen needs a value")
    }

    @Test func shortSecretAndBadURLAreRefused() {
        #expect(throws: SettingsError.self) { try configuration(["--jwt-secret", "short"]) }
        #expect(throws: SettingsError.self) { try configuration(["--database-url", "mysql://x"]) }
        #expect(throws: SettingsError.self) { try configuration(["--listen", "8080"]) }
    }

    @Test func aSwitchReadsTrueOrFalseFromItsVariableAndFlag() throws {
        #expect(try !configuration([]).sharesPort)
        var environment = Self.environment
        environment["FERRY_SHARE_PORT"] = "true"
        #expect(try configuration([], environment: environment).sharesPort)
        #expect(try !configuration(["--share-port=false"], environment: environment).sharesPort)
        environment["FERRY_SHARE_PORT"] = "maybe"
        let error = #expect(throws: SettingsError.self) { try configuration([], environment: environment) }
        #expect(error?.description == "invalid FERRY_SHARE_PORT: maybe (expected true or false)")
    }

    /// `ferry dev` must not lock a developer out of their own server for an hour after a
    /// few wrong passwords, nor refuse a load test's sign-ups; a variable still sets them.
    @Test func developmentDefaultsRaiseTheSignUpAndFailedSignInLimitsUnlessAVariableSetsThem() throws {
        func development(_ environment: [String: String]) throws -> GatewayConfiguration {
            try GatewayConfiguration(
                SettingValues(
                    GatewayConfiguration.settings, arguments: [], environment: environment,
                    defaults: GatewayConfiguration.developmentDefaults))
        }
        let raised = try development(Self.environment)
        #expect(raised.failedSignInsPerHour == 1_000_000_000 && raised.anonymousSignUpsPerHour == 1_000_000_000)
        var environment = Self.environment
        environment["FERRY_FAILED_SIGNINS_PER_HOUR"] = "3"
        let chosen = try development(environment)
        #expect(chosen.failedSignInsPerHour == 3 && chosen.anonymousSignUpsPerHour == 1_000_000_000)
        let production = try configuration([])
        #expect(production.failedSignInsPerHour == 20 && production.anonymousSignUpsPerHour == 30)
    }
}
