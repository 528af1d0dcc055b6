/// A missing or invalid setting: the CLI prints it as one line and exits 2.
public struct SettingsError: Error, CustomStringConvertible, Equatable {
    /// The one line to print, naming the flag and the environment variable.
    public let description: String

    /// An error with the given text.
    public init(_ description: String) { self.description = description }
}

/// The values of a command's settings, resolved from arguments and environment.
public struct SettingValues: Sendable {
    private var values: [String: [String]] = [:]
    private let settings: [String: Setting]
    /// Arguments that are not flags, in order (e.g. `start` in `ferry db start`).
    public private(set) var positional: [String] = []

    /// Resolves `settings` from `arguments` (flags win), `environment`, then `defaults`
    /// (flag → value, in place of a setting's own default: what `ferry dev` changes).
    ///
    /// Accepts `--flag value`, `--flag=value` and bare switches. Unknown flags,
    /// a missing value and a missing required setting are errors.
    public init(
        _ settings: [Setting], arguments: [String], environment: [String: String], defaults: [String: String] = [:]
    ) throws(SettingsError) {
        self.settings = Dictionary(settings.map { ($0.flag, $0) }, uniquingKeysWith: { first, _ in first })
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--") else {
                positional.append(argument)
                continue
            }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            guard let setting = self.settings[name] else {
                throw SettingsError("unknown option --\(name) (see --help)")
            }
            if setting.isSwitch {
                values[name, default: []].append(try Self.switchValue(inlineValue ?? "true", "--\(name)"))
                continue
            }
            if let inlineValue {
                values[name, default: []].append(inlineValue)
            } else if index < arguments.count {
                values[name, default: []].append(arguments[index])
                index += 1
            } else {
                throw SettingsError("option --\(name) needs a value")
            }
        }
        for setting in settings where values[setting.flag] == nil {
            if let variable = setting.environment, let value = environment[variable], !value.isEmpty {
                if setting.isRepeatable {
                    values[setting.flag] = value.split(separator: ":").map(String.init)
                    continue
                }
                values[setting.flag] = [setting.isSwitch ? try Self.switchValue(value, variable) : value]
            } else if let value = defaults[setting.flag] ?? setting.defaultValue {
                values[setting.flag] = [value]
            } else if !setting.isOptional {
                let source =
                    setting.environment.map { "set \($0) or pass --\(setting.flag)" } ?? "pass --\(setting.flag)"
                throw SettingsError("missing setting: \(source) (\(setting.help))")
            }
        }
    }

    /// A switch's value as `true` or `false`; anything else names `source` in an error.
    private static func switchValue(_ text: String, _ source: String) throws(SettingsError) -> String {
        switch text.lowercased() {
        case "true", "1", "yes", "on": return "true"
        case "false", "0", "no", "off": return "false"
        default: throw SettingsError("invalid \(source): \(text) (expected true or false)")
        }
    }

    /// The value of a single-valued setting, or nil when it has none.
    public func string(_ flag: String) -> String? {
        precondition(settings[flag] != nil, "setting --\(flag) is not declared")
        return values[flag]?.last
    }

    /// Every value given for a repeatable setting, in order.
    public func strings(_ flag: String) -> [String] {
        precondition(settings[flag] != nil, "setting --\(flag) is not declared")
        return values[flag] ?? []
    }

    /// Whether a switch was given.
    public func isOn(_ flag: String) -> Bool {
        string(flag) == "true"
    }

    /// The value as an integer within `range`.
    public func integer(_ flag: String, in range: ClosedRange<Int>) throws(SettingsError) -> Int? {
        guard let text = string(flag) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw SettingsError(
                "invalid \(name(flag)): \(text) is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    /// The value as a number within `range` (`0.5`, `200`, `1e3`).
    public func number(_ flag: String, in range: ClosedRange<Double>) throws(SettingsError) -> Double? {
        guard let text = string(flag) else { return nil }
        guard let value = Double(text), range.contains(value) else {
            throw SettingsError(
                "invalid \(name(flag)): \(text) is not a number in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }

    /// The value as a duration in seconds, written as a whole number and a unit:
    /// `30d`, `12h`, `15m`, `45s` (days, hours, minutes, seconds), at least 1 s and at most
    /// `maximumSeconds`.
    public func duration(_ flag: String, maximumSeconds: Int = 100 * 365 * 86_400) throws(SettingsError) -> Int? {
        guard let text = string(flag) else { return nil }
        guard let seconds = Self.parseDuration(text), seconds <= maximumSeconds else {
            throw SettingsError(
                "invalid \(name(flag)): \(text) is not a duration such as 30d, 12h, 15m or 45s (1 s to \(maximumSeconds / 86_400) days)"
            )
        }
        return seconds
    }

    /// `30d`, `12h`, `15m`, `45s` in seconds; nil for anything else or zero.
    public static func parseDuration(_ text: String) -> Int? {
        let units: [Character: Int] = ["d": 86_400, "h": 3_600, "m": 60, "s": 1]
        guard let unit = text.last, let scale = units[unit] else { return nil }
        let digits = text.dropLast()
        guard !digits.isEmpty, digits.count <= 9, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber),
            let count = Int(digits), count > 0
        else { return nil }
        return count * scale
    }

    /// The value as one of `choices`.
    public func choice(_ flag: String, _ choices: [String]) throws(SettingsError) -> String? {
        guard let text = string(flag) else { return nil }
        guard choices.contains(text) else {
            let expected =
                choices.count > 1
                ? choices.dropLast().joined(separator: ", ") + " or " + choices.last! : choices.joined()
            throw SettingsError("invalid \(name(flag)): \(text) (expected \(expected))")
        }
        return text
    }

    /// How an error should name the setting: the flag and the variable.
    public func name(_ flag: String) -> String {
        guard let variable = settings[flag]?.environment else { return "--\(flag)" }
        return "--\(flag) / \(variable)"
    }
}
