import FerryCommandLine
import FerryTestSupport
import Testing

/// How flags, variables and defaults resolve into a command's values.
@Suite(.tagSelection) struct SettingValuesTests {
    @Test func aRepeatableSettingsVariableIsAListAndFlagsReplaceIt() throws {
        let settings = [Setting("dir", env: "FERRY_MIGRATE_DIRS", help: "a directory", isRepeatable: true)]
        let environment = ["FERRY_MIGRATE_DIRS": "/srv/app/migrations:/srv/billing/migrations"]
        let fromVariable = try SettingValues(settings, arguments: [], environment: environment)
        #expect(fromVariable.strings("dir") == ["/srv/app/migrations", "/srv/billing/migrations"])
        let fromFlags = try SettingValues(settings, arguments: ["--dir", "mine"], environment: environment)
        #expect(fromFlags.strings("dir") == ["mine"])
    }

    @Test func repeatableSwitchAndPositionalArguments() throws {
        let settings = [
            Setting("dir", help: "a directory", isRepeatable: true),
            Setting("dry-run", help: "change nothing", isSwitch: true),
        ]
        let values = try SettingValues(
            settings, arguments: ["start", "--dir", "a", "--dry-run", "--dir=b"], environment: [:])
        #expect(values.strings("dir") == ["a", "b"])
        #expect(values.isOn("dry-run"))
        #expect(values.positional == ["start"])
    }
}
