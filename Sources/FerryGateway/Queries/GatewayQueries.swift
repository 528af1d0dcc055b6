/// Every query the gateway makes. `QueryShapeTests` checks each one's SQL against its
/// columns on a migrated database, and that no two share a prepared name: a new query
/// is added here.
enum GatewayQueries {
    static let all: [any DatabaseQuery.Type] = [
        SignUpAnonymous.self, RefreshSession.self, FindCredentials.self, SignIn.self, RecentRevocations.self,
        CurrentAccount.self, LinkEmail.self, SignOut.self, DeleteAccount.self,
        Push.self, Pull.self, TableSchema.self,
        WatermelonPull.self, WatermelonPush.self,
        ClaimLock.self, HeartbeatLock.self, ReleaseLock.self,
        SchemaVersion.self, PurgeTombstones.self,
    ]
}
