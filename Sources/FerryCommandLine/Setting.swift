/// One configurable value: read from a command-line flag, else an environment
/// variable, else its default. The same table prints `--help`, so what a command
/// accepts and what it documents cannot drift apart.
public struct Setting: Sendable {
    /// The flag without dashes, e.g. `database-url`.
    public let flag: String
    /// The environment variable, e.g. `FERRY_DATABASE_URL`; nil for flag-only settings.
    public let environment: String?
    /// The value used when neither flag nor environment gives one; nil means required
    /// (unless ``isOptional``).
    public let defaultValue: String?
    /// One line of help.
    public let help: String
    /// A flag that takes no value (`--dry-run`); `--flag=false` and its variable say
    /// `true` or `false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
    public let isSwitch: Bool
    /// A flag that may be given more than once (`--dir a --dir b`); its variable is a
    /// list separated by `:`, as `PATH` is (`FERRY_MIGRATE_DIRS=a:b`).
    public let isRepeatable: Bool
    /// Whether the setting may be absent without a default.
    public let isOptional: Bool
    /// Whether the value is a secret that must never be printed.
    public let isSecret: Bool

    /// Declares a setting.
    public init(
        _ flag: String, env environment: String? = nil, default defaultValue: String? = nil, help: String,
        isSwitch: Bool = false, isRepeatable: Bool = false, isOptional: Bool = false, isSecret: Bool = false
    ) {
        self.flag = flag
        self.environment = environment
        self.defaultValue = defaultValue
        self.help = help
        self.isSwitch = isSwitch
        self.isRepeatable = isRepeatable
        self.isOptional = isOptional || isSwitch || isRepeatable
        self.isSecret = isSecret
    }
}

extension Setting {
    /// Formats settings for `--help`: one line each, with its variable and default.
    public static func helpText(_ settings: [Setting]) -> String {
        settings.map { setting in
            var left = "  --\(setting.flag)"
            if !setting.isSwitch { left += " <value>" }
            var right = setting.help
            if let variable = setting.environment { right += " [\(variable)]" }
            if let value = setting.defaultValue, !setting.isSecret { right += " (default: \(value))" }
            if setting.isRepeatable {
                right += setting.environment == nil ? " (repeatable)" : " (repeatable; the variable: a:b)"
            }
            let padding = max(2, 34 - left.count)
            return left + String(repeating: " ", count: padding) + right
        }.joined(separator: "\n")
    }
}
