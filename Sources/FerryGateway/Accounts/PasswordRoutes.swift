import FerryHTTP

/// PROTOCOL.md's password routes: a signed-in change (``PasswordChange``) and a reset by
/// a mailed code (``PasswordReset``).
struct PasswordRoutes {
    let accounts: Accounts

    /// Adds the routes for one loop; handlers use that loop's `context`.
    func register(in router: inout Router, context: LoopContext) {
        router.post("/v1/auth/recover") { [accounts] request, responder in
            PasswordReset.request(request, responder, context, accounts)
        }
        router.post("/v1/auth/recover/confirm") { [accounts] request, responder in
            PasswordReset.confirm(request, responder, context, accounts)
        }
        router.group(gate: accounts.callers) { [accounts] routes in
            routes.post("/v1/auth/password") { request, caller, responder in
                PasswordChange.start(request, caller, responder, context, accounts)
            }
        }
    }
}
