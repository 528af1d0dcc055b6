import FerryCommandLine
import FerryHTTP
import Foundation

/// Everything `ferry serve` needs, validated. Built from flags and `FERRY_*`
/// environment variables by ``init(_:)``; `ferry dev` fills it in itself.
public struct GatewayConfiguration: Sendable {
    /// PostgreSQL URL for the request path (the gateway's login role).
    public var databaseURL: String
    /// PostgreSQL URL for the LISTEN connection: must reach the primary directly
    /// (LISTEN does not work through transaction-pooling pgbouncer).
    public var listenDatabaseURL: String
    /// PostgreSQL URLs of hot standbys of the primary for pulls and `/v1/schema`
    /// (`--read-database-url`); empty: everything runs on the primary.
    public var readDatabaseURLs: [String]
    /// Milliseconds a pull waits for a read replica to replay past the primary's position
    /// at the pull's arrival before it runs on the primary instead.
    public var replicaWaitMilliseconds: Int
    /// PostgreSQL URL of the email directory shared by every shard (`--directory-database-url`,
    /// docs/SCALING.md "The email directory"); nil: unsharded, an email is unique in this
    /// database only.
    public var directoryDatabaseURL: String?
    /// Seconds a directory claim may stay pending before this shard's gateways settle it
    /// against their database (`--directory-claim-seconds`).
    public var directoryClaimSeconds: Int
    /// Each other shard's gateways' base URL (`--shard-urls`, `1=http://host:port,…`): a
    /// sign-in for an email the directory puts on another shard is forwarded there.
    public var shardURLs: [Int: String]
    /// Host to bind (numeric IPv4 or IPv6).
    public var host: String
    /// Port to bind; 0 picks a free one.
    public var port: Int
    /// Event loops (threads), each accepting on the port with `SO_REUSEPORT`.
    public var threads: Int
    /// Whether other processes may serve the same address (`SO_REUSEPORT` across
    /// processes); when false, an address another process serves is refused at start.
    public var sharesPort: Bool
    /// The proxies in front (haproxy): their connections must start with a PROXY
    /// protocol header, which names the client every limit and log line sees.
    public var trustedProxies: TrustedProxies
    /// The web origins whose pages may call from a browser (`FERRY_CORS_ORIGINS`).
    public var cors: CORSPolicy
    /// The HS256 secret that signs access tokens.
    public var jwtSecret: String
    /// An older secret still accepted during key rotation.
    public var jwtPreviousSecret: String?
    /// Text or JSON logs.
    public var logFormat: Logger.Format
    /// The least severe log lines written (probes' request lines are `debug`).
    public var logLevel: Logger.Level
    /// Database connections per loop.
    public var poolSize: Int
    /// Seconds `ferry serve` waits at start for the database to answer with Ferry's
    /// schema at this binary's version, before it gives up.
    public var databaseWaitSeconds: Int
    /// Server-side statement timeout, milliseconds.
    public var statementTimeoutMilliseconds: Int
    /// Whether the request pools prepare their statements (named, once per connection):
    /// off for a pooler in transaction mode, where a server connection serves many clients
    /// and named statements collide (`--prepared-statements off`).
    public var preparesStatements: Bool
    /// Whether each loop answers the shared part of pulls from its memory of the `shared`
    /// tables' changes (`--shared-pull-cache`, docs/OPERATIONS.md "Shared-change storms").
    public var sharedPullCache: Bool
    /// Milliseconds a pull waits for its loop's memory of shared changes to be current
    /// (`--shared-pull-wait-ms`) before PostgreSQL answers it instead.
    public var sharedPullWaitMilliseconds: Int
    /// Largest request body accepted, bytes.
    public var maxBodyBytes: Int
    /// Most mutations accepted in one push.
    public var maxPushMutations: Int
    /// Seconds a client has to send a request's headers.
    public var headerTimeoutSeconds: Int
    /// Seconds an idle keep-alive connection stays open.
    public var idleTimeoutSeconds: Int
    /// Seconds a request body may take from its head, however steadily it arrives
    /// (then `408`).
    public var bodyTimeoutSeconds: Int
    /// Request body bytes the process holds at once over every connection (more: `503`).
    public var bodyBufferBytes: Int
    /// Bytes of answers one connection may have waiting for its client before the
    /// gateway stops reading it (every connection, streams included).
    public var maxUnsentBytes: Int
    /// Seconds in-flight requests get to finish after SIGTERM/SIGINT.
    public var shutdownTimeoutSeconds: Int
    /// Seconds an access token is valid.
    public var accessTokenSeconds: Int
    /// Seconds of clock difference tolerated when checking a token's times.
    public var tokenLeewaySeconds: Int
    /// Anonymous sign-ups allowed per client address per hour.
    public var anonymousSignUpsPerHour: Int
    /// Failed sign-ins allowed per email and per client address per hour (all gateways).
    public var failedSignInsPerHour: Int
    /// Seconds a rotated refresh token is answered with its successor again (0: never).
    public var refreshGraceSeconds: Int
    /// Refreshes allowed per session per minute.
    public var refreshesPerSessionPerMinute: Int
    /// Refreshes allowed per client address per minute.
    public var refreshesPerAddressPerMinute: Int
    /// Password-reset requests allowed per email and per client address per hour.
    public var recoveryRequestsPerHour: Int
    /// Sign-ins that open a session allowed per account per hour (all gateways).
    public var signInsPerAccountPerHour: Int
    /// Password hashes (link, sign-in) one client address may have in flight on this process.
    public var passwordHashesPerAddress: Int
    /// Password hashes (link, sign-in) one email may have in flight on this process.
    public var passwordHashesPerEmail: Int
    /// Database requests one device may have in flight on this process (more: `429`).
    public var requestsPerDevice: Int
    /// Database requests one user may have in flight on this process, over all its devices (more: `429`).
    public var requestsPerUser: Int
    /// Push body bytes one device may send per second on this process.
    public var pushBytesPerSecond: Int
    /// Largest body of a WatermelonDB push (`POST /v1/watermelon/sync`), bytes: in place
    /// of ``maxBodyBytes`` on that route, since an app's first push carries everything
    /// it made offline.
    public var watermelonMaxBodyBytes: Int
    /// Most records (created, updated and deleted) in one WatermelonDB push.
    public var watermelonMaxPushRecords: Int
    /// Longest a streamed WatermelonDB pull answer may take, seconds: past it the answer
    /// is cut short (the client sees a truncated body) and its transaction ends.
    public var watermelonPullSeconds: Int

    /// Milliseconds between stream heartbeats (`heartbeat_ms` of `hello`).
    public var streamHeartbeatMilliseconds: Int
    /// Seconds before token expiry a stream gets `token_expiring`.
    public var streamTokenWarningSeconds: Int
    /// Largest message a WebSocket client may send, bytes (larger: close 1009).
    public var streamMaxMessageBytes: Int
    /// Unsent bytes over which a stream is closed `4008 too_slow`; at most ``maxUnsentBytes``.
    public var streamMaxUnsentBytes: Int
    /// Milliseconds a WebSocket waits for the client's close frame after sending its own;
    /// then the connection is closed and what is still unsent (the close frame itself, for
    /// a client that is slow to read) is dropped.
    public var streamCloseTimeoutMilliseconds: Int
    /// Streams one user may hold open on this process (more: `429`).
    public var streamsPerUser: Int

    /// Seconds between in-process tombstone purges; nil: no timer (run `ferry purge-tombstones`).
    public var purgeTombstonesEverySeconds: Int?
    /// How old a tombstone must be before a purge deletes it, seconds.
    public var tombstoneRetentionSeconds: Int

    /// The SMTP relay mail goes through (`smtp://host:port`, `smtps://…`); nil: no mail is
    /// sent, and the routes that need it answer `404`.
    public var smtpURL: String?
    /// The sender of every mail, `Name <address>` or `address`.
    public var mailFrom: String
    /// The folder whose templates replace the built-in ones, if any.
    public var mailTemplatesFolder: String?
    /// Whether a linked email must be confirmed with a mailed code before it can sign in
    /// (`required`; needs ``smtpURL``) or is confirmed at once (`off`).
    public var requiresEmailConfirmation: Bool
    /// The templates, built in or the folder's, read and checked at start.
    var mailTemplates: MailTemplates

    /// The settings `ferry serve` reads; `--help` prints them.
    public static let settings: [Setting] = [
        Setting(
            "database-url", env: "FERRY_DATABASE_URL",
            help: "PostgreSQL URL for requests, e.g. postgresql://ferry_gateway:…@db:5432/app", isSecret: true),
        Setting(
            "listen-database-url", env: "FERRY_LISTEN_DATABASE_URL",
            help: "PostgreSQL URL for LISTEN (direct to the primary; defaults to --database-url)", isOptional: true,
            isSecret: true),
        Setting(
            "read-database-url", env: "FERRY_READ_DATABASE_URL",
            help: "PostgreSQL URLs of hot standbys for pulls and /v1/schema, comma-separated (default: none)",
            isOptional: true, isSecret: true),
        Setting(
            "directory-database-url", env: "FERRY_DIRECTORY_DATABASE_URL",
            help: "PostgreSQL URL of the email directory every shard shares (docs/SCALING.md); default: none",
            isOptional: true, isSecret: true),
        Setting(
            "directory-claim-seconds", env: "FERRY_DIRECTORY_CLAIM_SECONDS", default: "120",
            help: "seconds a directory claim may stay pending before its shard settles it (longer than any link takes)"),
        Setting(
            "shard-urls", env: "FERRY_SHARD_URLS",
            help: "each shard's gateways, <shard>=http://host:port comma-separated, for sign-ins of their emails",
            isOptional: true),
        Setting(
            "replica-wait-ms", env: "FERRY_REPLICA_WAIT_MS", default: "200",
            help: "milliseconds a pull waits for a read replica to replay what it must see, then runs on the primary"),
        Setting("listen", env: "FERRY_LISTEN", default: "0.0.0.0:8080", help: "address to serve HTTP on, host:port"),
        Setting(
            "share-port", env: "FERRY_SHARE_PORT",
            help: "let other processes serve the same address (the kernel splits connections); default: refuse",
            isSwitch: true),
        Setting(
            "trusted-proxies", env: "FERRY_TRUSTED_PROXIES",
            help:
                "comma-separated CIDR blocks of the proxies in front (e.g. 10.0.0.0/8,::1): their connections must start with a PROXY protocol header naming the client (default: none)",
            isOptional: true),
        Setting(
            "cors-origins", env: "FERRY_CORS_ORIGINS",
            help:
                "comma-separated web origins whose pages may call from a browser, exactly (e.g. https://app.example.org); default: none",
            isOptional: true),
        Setting(
            "threads", env: "FERRY_THREADS", default: String(ProcessInfo.processInfo.activeProcessorCount),
            help: "event loops (one per core is best)"),
        Setting(
            "jwt-secret", env: "FERRY_JWT_SECRET", help: "HS256 secret for access tokens, at least 32 bytes",
            isSecret: true),
        Setting(
            "jwt-previous-secret", env: "FERRY_JWT_PREVIOUS_SECRET",
            help: "older secret still accepted while rotating keys", isOptional: true, isSecret: true),
        Setting("log-format", env: "FERRY_LOG_FORMAT", default: "text", help: "log lines as text or json"),
        Setting(
            "log-level", env: "FERRY_LOG_LEVEL", default: "info",
            help: "least severe lines logged: debug (adds /healthz, /readyz, /metrics), info, warning, error"),
        Setting("pool-size", env: "FERRY_POOL_SIZE", default: "8", help: "database connections per event loop"),
        Setting(
            "database-wait", env: "FERRY_DATABASE_WAIT", default: "30s",
            help: "how long to wait at start for the database and its migrations, e.g. 30s (then exit 1)"),
        Setting(
            "statement-timeout-ms", env: "FERRY_STATEMENT_TIMEOUT_MS", default: "10000",
            help: "server-side statement timeout"),
        Setting(
            "prepared-statements", env: "FERRY_PREPARED_STATEMENTS", default: "on",
            help: "on: statements prepared once per connection; off: unnamed (pgbouncer in transaction mode)"),
        Setting(
            "shared-pull-cache", env: "FERRY_SHARED_PULL_CACHE", default: "on",
            help: "on: pulls whose only news is in shared tables are answered from memory; off: all from PostgreSQL"),
        Setting(
            "shared-pull-wait-ms", env: "FERRY_SHARED_PULL_WAIT_MS", default: "1000",
            help: "milliseconds a pull waits for the memory of shared changes to be current, then goes to PostgreSQL"),
        Setting(
            "max-body-bytes", env: "FERRY_MAX_BODY_BYTES", default: "1048576",
            help: "largest request body accepted (larger: 413)"),
        Setting(
            "max-push-mutations", env: "FERRY_MAX_PUSH_MUTATIONS", default: "1000",
            help: "most mutations in one push (more: 413)"),
        Setting(
            "header-timeout", env: "FERRY_HEADER_TIMEOUT", default: "10",
            help: "seconds a client has to send a request's headers"),
        Setting(
            "idle-timeout", env: "FERRY_IDLE_TIMEOUT", default: "75",
            help: "seconds an idle keep-alive connection stays open"),
        Setting(
            "body-timeout", env: "FERRY_BODY_TIMEOUT", default: "60",
            help: "seconds a request body may take from its head, whatever its pace (then 408)"),
        Setting(
            "body-buffer-bytes", env: "FERRY_BODY_BUFFER_BYTES", default: "67108864",
            help: "request body bytes held at once over all connections (more: 503 with Retry-After)"),
        Setting(
            "max-unsent-bytes", env: "FERRY_MAX_UNSENT_BYTES", default: "262144",
            help: "bytes of answers a connection may have waiting for its client; past it reading stops"),
        Setting(
            "shutdown-timeout", env: "FERRY_SHUTDOWN_TIMEOUT", default: "10",
            help: "seconds requests in flight get to finish on SIGTERM"),
        Setting(
            "access-token-ttl", env: "FERRY_ACCESS_TOKEN_TTL", default: "3600",
            help: "seconds an access token is valid"),
        Setting(
            "token-leeway", env: "FERRY_TOKEN_LEEWAY", default: "30",
            help: "seconds of clock skew tolerated when checking token times"),
        Setting(
            "anonymous-signups-per-hour", env: "FERRY_ANONYMOUS_SIGNUPS_PER_HOUR", default: "30",
            help: "anonymous sign-ups per client address per hour (more: 429)"),
        Setting(
            "failed-signins-per-hour", env: "FERRY_FAILED_SIGNINS_PER_HOUR", default: "20",
            help: "failed sign-ins per email and per client address per hour, all gateways (more: 429)"),
        Setting(
            "signins-per-account-per-hour", env: "FERRY_SIGNINS_PER_ACCOUNT_PER_HOUR", default: "30",
            help: "sign-ins that open a session per account per hour, all gateways (more: 429)"),
        Setting(
            "password-hashes-per-address", env: "FERRY_PASSWORD_HASHES_PER_ADDRESS", default: "1",
            help: "password hashes (link, sign-in) one client address may have in flight on this gateway (more: 429)"),
        Setting(
            "password-hashes-per-email", env: "FERRY_PASSWORD_HASHES_PER_EMAIL", default: "1",
            help: "password hashes (link, sign-in) one email may have in flight on this gateway (more: 429)"),
        Setting(
            "refresh-grace", env: "FERRY_REFRESH_GRACE", default: "30",
            help: "seconds a rotated refresh token still gets its successor (a lost answer's retry); 0: never"),
        Setting(
            "refreshes-per-session", env: "FERRY_REFRESHES_PER_SESSION", default: "10",
            help: "refreshes per session per minute (more: 429)"),
        Setting(
            "refreshes-per-address", env: "FERRY_REFRESHES_PER_ADDRESS", default: "600",
            help: "refreshes per client address per minute (more: 429)"),
        Setting(
            "recovery-requests-per-hour", env: "FERRY_RECOVERY_REQUESTS_PER_HOUR", default: "10",
            help: "password reset requests per email and per client address per hour (more: 429)"),
        Setting(
            "requests-per-device", env: "FERRY_REQUESTS_PER_DEVICE", default: "3",
            help: "database requests one device may have in flight on this gateway (more: 429)"),
        Setting(
            "requests-per-user", env: "FERRY_REQUESTS_PER_USER", default: "4",
            help: "database requests one user may have in flight on this gateway, all devices (more: 429)"),
        Setting(
            "push-bytes-per-second", env: "FERRY_PUSH_BYTES_PER_SECOND", default: "65536",
            help: "push body bytes one device may send per second on this gateway (more: 429)"),
        Setting(
            "watermelon-max-body-bytes", env: "FERRY_WATERMELON_MAX_BODY_BYTES", default: "16777216",
            help: "largest body of a WatermelonDB push, POST /v1/watermelon/sync (larger: 413)"),
        Setting(
            "watermelon-max-push-records", env: "FERRY_WATERMELON_MAX_PUSH_RECORDS", default: "20000",
            help: "most records in one WatermelonDB push (more: 413)"),
        Setting(
            "watermelon-pull-seconds", env: "FERRY_WATERMELON_PULL_SECONDS", default: "600",
            help: "longest a WatermelonDB pull answer may take to stream, seconds (longer: cut short)"),
        Setting(
            "stream-heartbeat-ms", env: "FERRY_STREAM_HEARTBEAT_MS", default: "25000",
            help: "milliseconds between stream heartbeats (WebSocket ping, SSE comment)"),
        Setting(
            "stream-token-warning", env: "FERRY_STREAM_TOKEN_WARNING", default: "60",
            help: "seconds before token expiry a stream is sent token_expiring"),
        Setting(
            "stream-max-message-bytes", env: "FERRY_STREAM_MAX_MESSAGE_BYTES", default: "16384",
            help: "largest message a WebSocket client may send (larger: close 1009)"),
        Setting(
            "stream-max-unsent-bytes", env: "FERRY_STREAM_MAX_UNSENT_BYTES", default: "65536",
            help: "unsent bytes over which a stream is closed 4008 too_slow"),
        Setting(
            "stream-close-timeout-ms", env: "FERRY_STREAM_CLOSE_TIMEOUT_MS", default: "2000",
            help: "milliseconds a WebSocket waits for the client's close frame after sending its own"),
        Setting(
            "streams-per-user", env: "FERRY_STREAMS_PER_USER", default: "16",
            help: "streams one user may hold open on this gateway (more: 429)"),
        Setting(
            "purge-tombstones-every", env: "FERRY_PURGE_TOMBSTONES_EVERY",
            help: "purge old tombstones in-process this often, e.g. 1h (default: off)", isOptional: true),
        Setting(
            "tombstone-retention", env: "FERRY_TOMBSTONE_RETENTION", default: "30d",
            help: "how old a tombstone must be for the in-process purge, e.g. 30d"),
        Setting(
            "smtp-url", env: "FERRY_SMTP_URL",
            help:
                "SMTP relay for account mail, e.g. smtp://relay:587 or smtps://user:pass@relay:465 (default: no mail)",
            isOptional: true, isSecret: true),
        Setting(
            "mail-from", env: "FERRY_MAIL_FROM", default: "Ferry <no-reply@localhost>",
            help: "sender of account mail, Name <address>"),
        Setting(
            "mail-templates", env: "FERRY_MAIL_TEMPLATES",
            help: "folder of mail templates replacing the built-in ones (recovery.txt, confirmation.txt)",
            isOptional: true),
        Setting(
            "email-confirmation", env: "FERRY_EMAIL_CONFIRMATION", default: "off",
            help: "required: a linked email signs in once confirmed with a mailed code (needs --smtp-url); off"),
    ]

    /// The defaults `ferry dev` uses instead of ``settings``' own (a flag or variable
    /// still wins): local tests and load tests sign up, and developers get passwords
    /// wrong, far more often than a phone does; production limits would lock them out
    /// of their own server for an hour.
    public static let developmentDefaults = [
        "anonymous-signups-per-hour": "1000000000", "failed-signins-per-hour": "1000000000",
        "recovery-requests-per-hour": "1000000000",
        "signins-per-account-per-hour": "1000000000", "password-hashes-per-address": "64",
        "email-confirmation": "off",
        // The web dev servers' usual origins (Expo web / Metro, Vite): pages they serve call here.
        "cors-origins": "http://localhost:8081,http://127.0.0.1:8081,http://localhost:5173,http://127.0.0.1:5173",
    ]

    /// Validates resolved settings; the error names the offending flag and variable.
    public init(_ values: SettingValues) throws(SettingsError) {
        databaseURL = try Self.postgresURL(values, "database-url")
        listenDatabaseURL =
            values.string("listen-database-url") == nil
            ? databaseURL : try Self.postgresURL(values, "listen-database-url")
        readDatabaseURLs = try (values.string("read-database-url") ?? "").split(separator: ",").map {
            url throws(SettingsError) in
            let url = url.trimmingCharacters(in: .whitespaces)
            guard url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") else {
                throw SettingsError("invalid \(values.name("read-database-url")): expected postgresql:// URLs")
            }
            return url
        }
        replicaWaitMilliseconds = try values.integer("replica-wait-ms", in: 0...60_000)!
        directoryDatabaseURL =
            values.string("directory-database-url") == nil
            ? nil : try Self.postgresURL(values, "directory-database-url")
        directoryClaimSeconds = try values.integer("directory-claim-seconds", in: 0...86_400)!
        shardURLs = [:]
        for entry in (values.string("shard-urls") ?? "").split(separator: ",") {
            let parts = entry.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let shard = Int(parts[0]), (0...65535).contains(shard),
                parts[1].hasPrefix("http://") || parts[1].hasPrefix("https://")
            else {
                throw SettingsError(
                    "invalid \(values.name("shard-urls")): expected <shard>=http://host:port, comma-separated")
            }
            var url = String(parts[1])
            while url.hasSuffix("/") { url.removeLast() }
            shardURLs[shard] = url
        }
        (host, port) = try Self.hostAndPort(values.string("listen")!, name: values.name("listen"))
        sharesPort = values.isOn("share-port")
        do {
            trustedProxies = try TrustedProxies(parsing: values.string("trusted-proxies") ?? "")
        } catch {
            throw SettingsError("invalid \(values.name("trusted-proxies")): \(error)")
        }
        do {
            cors = try CORSPolicy(parsing: values.string("cors-origins") ?? "")
        } catch {
            throw SettingsError("invalid \(values.name("cors-origins")): \(error)")
        }
        threads = try values.integer("threads", in: 1...256)!
        jwtSecret = values.string("jwt-secret")!
        guard jwtSecret.utf8.count >= 32 else {
            throw SettingsError("invalid \(values.name("jwt-secret")): must be at least 32 bytes")
        }
        jwtPreviousSecret = values.string("jwt-previous-secret")
        if let previous = jwtPreviousSecret, previous.utf8.count < 32 {
            throw SettingsError("invalid \(values.name("jwt-previous-secret")): must be at least 32 bytes")
        }
        logFormat = Logger.Format(rawValue: try values.choice("log-format", ["text", "json"])!)!
        logLevel = Logger.Level(rawValue: try values.choice("log-level", Logger.Level.allCases.map(\.rawValue))!)!
        poolSize = try values.integer("pool-size", in: 1...1000)!
        databaseWaitSeconds = try values.duration("database-wait", maximumSeconds: 86_400)!
        statementTimeoutMilliseconds = try values.integer("statement-timeout-ms", in: 1...3_600_000)!
        preparesStatements = try values.choice("prepared-statements", ["on", "off"]) == "on"
        sharedPullCache = try values.choice("shared-pull-cache", ["on", "off"]) == "on"
        sharedPullWaitMilliseconds = try values.integer("shared-pull-wait-ms", in: 1...60_000)!
        maxBodyBytes = try values.integer("max-body-bytes", in: 1024...(1 << 30))!
        maxPushMutations = try values.integer("max-push-mutations", in: 1...1_000_000)!
        headerTimeoutSeconds = try values.integer("header-timeout", in: 1...3600)!
        idleTimeoutSeconds = try values.integer("idle-timeout", in: 1...86_400)!
        bodyTimeoutSeconds = try values.integer("body-timeout", in: 1...86_400)!
        bodyBufferBytes = try values.integer("body-buffer-bytes", in: 1024...(1 << 40))!
        shutdownTimeoutSeconds = try values.integer("shutdown-timeout", in: 0...3600)!
        accessTokenSeconds = try values.integer("access-token-ttl", in: 60...86_400)!
        tokenLeewaySeconds = try values.integer("token-leeway", in: 0...300)!
        anonymousSignUpsPerHour = try values.integer("anonymous-signups-per-hour", in: 1...1_000_000_000)!
        failedSignInsPerHour = try values.integer("failed-signins-per-hour", in: 1...1_000_000_000)!
        refreshGraceSeconds = try values.integer("refresh-grace", in: 0...3600)!
        refreshesPerSessionPerMinute = try values.integer("refreshes-per-session", in: 1...1_000_000_000)!
        refreshesPerAddressPerMinute = try values.integer("refreshes-per-address", in: 1...1_000_000_000)!
        recoveryRequestsPerHour = try values.integer("recovery-requests-per-hour", in: 1...1_000_000_000)!
        signInsPerAccountPerHour = try values.integer("signins-per-account-per-hour", in: 1...1_000_000_000)!
        passwordHashesPerAddress = try values.integer("password-hashes-per-address", in: 1...100_000)!
        passwordHashesPerEmail = try values.integer("password-hashes-per-email", in: 1...100_000)!
        requestsPerDevice = try values.integer("requests-per-device", in: 1...100_000)!
        requestsPerUser = try values.integer("requests-per-user", in: 1...100_000)!
        pushBytesPerSecond = try values.integer("push-bytes-per-second", in: 1024...(1 << 30))!
        watermelonMaxBodyBytes = try values.integer("watermelon-max-body-bytes", in: 1024...(1 << 30))!
        watermelonMaxPushRecords = try values.integer("watermelon-max-push-records", in: 1...1_000_000)!
        watermelonPullSeconds = try values.integer("watermelon-pull-seconds", in: 1...86_400)!
        // A body the budget can never hold could never be taken.
        for flag in ["max-body-bytes", "watermelon-max-body-bytes"] {
            let limit = flag == "max-body-bytes" ? maxBodyBytes : watermelonMaxBodyBytes
            guard limit <= bodyBufferBytes else {
                throw SettingsError(
                    "invalid \(values.name(flag)): \(limit) is over \(values.name("body-buffer-bytes")) (\(bodyBufferBytes)), the request bytes the gateway holds at once"
                )
            }
        }
        streamHeartbeatMilliseconds = try values.integer("stream-heartbeat-ms", in: 100...3_600_000)!
        streamTokenWarningSeconds = try values.integer("stream-token-warning", in: 1...3600)!
        streamMaxMessageBytes = try values.integer("stream-max-message-bytes", in: 256...(16 << 20))!
        maxUnsentBytes = try values.integer("max-unsent-bytes", in: 16384...(1 << 30))!
        streamMaxUnsentBytes = try values.integer("stream-max-unsent-bytes", in: 1024...(1 << 30))!
        // A stream is a connection too: past the connection bound its cues must close it.
        guard streamMaxUnsentBytes <= maxUnsentBytes else {
            throw SettingsError(
                "invalid \(values.name("stream-max-unsent-bytes")): \(streamMaxUnsentBytes) is over \(values.name("max-unsent-bytes")) (\(maxUnsentBytes)), the bound of every connection"
            )
        }
        streamCloseTimeoutMilliseconds = try values.integer("stream-close-timeout-ms", in: 100...600_000)!
        streamsPerUser = try values.integer("streams-per-user", in: 1...100_000)!
        purgeTombstonesEverySeconds = try values.duration("purge-tombstones-every", maximumSeconds: 365 * 86_400)
        tombstoneRetentionSeconds = try values.duration("tombstone-retention")!
        smtpURL = values.string("smtp-url")
        if let url = smtpURL, !(url.hasPrefix("smtp://") || url.hasPrefix("smtps://")) {
            throw SettingsError("invalid \(values.name("smtp-url")): expected an smtp:// or smtps:// URL")
        }
        mailFrom = values.string("mail-from")!
        guard MailMessage.isDeliverable(MailMessage.address(of: mailFrom)),
            MailMessage.address(of: mailFrom).contains("@")
        else {
            throw SettingsError("invalid \(values.name("mail-from")): expected Name <address> or address")
        }
        mailTemplatesFolder = values.string("mail-templates")
        do {
            mailTemplates = try MailTemplates.load(folder: mailTemplatesFolder)
        } catch {
            throw SettingsError("invalid \(values.name("mail-templates")): \(error)")
        }
        requiresEmailConfirmation = try values.choice("email-confirmation", ["required", "off"]) == "required"
        guard !requiresEmailConfirmation || smtpURL != nil else {
            throw SettingsError(
                "invalid \(values.name("email-confirmation")): required needs \(values.name("smtp-url")) to mail the codes"
            )
        }
    }

    private static func postgresURL(_ values: SettingValues, _ flag: String) throws(SettingsError) -> String {
        let url = values.string(flag)!
        guard url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") else {
            throw SettingsError("invalid \(values.name(flag)): expected a postgresql:// URL")
        }
        return url
    }

    /// Splits `host:port` (`[::1]:8080` for IPv6).
    static func hostAndPort(_ text: String, name: String) throws(SettingsError) -> (String, Int) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else {
            throw SettingsError("invalid \(name): \(text) (expected host:port, e.g. 0.0.0.0:8080)")
        }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw SettingsError("invalid \(name): \(text) has no host") }
        return (host, port)
    }
}
