/// Every query the gateway makes: a new query is added here. `QueryShapeTests` checks
/// each one's SQL against its columns on a migrated database, `QueryDecodingTests` that
/// no two share a prepared name.
enum GatewayQueries {
    static var all: [any DatabaseQuery.Type] {
        [
            SignUpAnonymous.self, RefreshSession.self, FindCredentials.self, SignIn.self, RecentRevocations.self,
            ReserveSignIn.self, SettleSignIn.self,
            CurrentAccount.self, LinkEmail.self, SignOut.self, DeleteAccount.self,
            CallerCredentials.self, ChangePassword.self, RequestPasswordReset.self, ResetPassword.self,
            ConfirmEmail.self, ResendConfirmation.self,
            Push.self, SendQueuedCues.self, SendQueuedCuesThenNotify.self, Pull.self, SharedChanges.self,
            TableSchema.self, PrimaryHistory.self, ReplicaCaughtUp.self,
            WatermelonPullOpen.self, WatermelonPush.self,
            ClaimLock.self, HeartbeatLock.self, ReleaseLock.self,
            SchemaVersion.self, NotifyListenerProbe.self, PurgeTombstones.self,
            ClaimMail.self, MailSent.self, MailFailed.self,
        ]
    }
}
