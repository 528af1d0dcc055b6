import FerryLoop
import Foundation
import Synchronization

extension Gateway {
    /// Runs a gateway until SIGINT or SIGTERM, then shuts it down gracefully.
    /// Returns the process exit status: 0 after a graceful stop, 1 when it could not
    /// start, 2 when its address is taken or not this machine's (a setting to change).
    public static func serve(_ configuration: GatewayConfiguration) -> Int32 {
        // Until they are watched, SIGINT and SIGTERM must wait rather than take their
        // default action (ending the process, perhaps with connections open): they stay
        // blocked, in the loop threads too (threads inherit the mask), until the watchers
        // exist. Then this thread unblocks them and takes any that came meanwhile (a
        // parent may have blocked them before exec: Foundation's Process does); libuv's
        // handler hands it to the watching loop.
        var shutdownSignals = sigset_t()
        sigemptyset(&shutdownSignals)
        sigaddset(&shutdownSignals, SIGINT)
        sigaddset(&shutdownSignals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &shutdownSignals, nil)
        let logger = Logger(format: configuration.logFormat, minimumLevel: configuration.logLevel)
        let gateway: Gateway
        do {
            gateway = try Gateway(configuration: configuration, logger: logger)
        } catch {
            logger.log(.error, "could not start", ["error": "\(error)"])
            return 1
        }
        let stopped = BlockingHandoff<Void>()
        let interruption = StartupInterruption()
        // A signal that comes before the server is up waits for it (an HTTPServer shut
        // down before it started could not start), unless the database is not ready:
        // then it ends the wait for the database.
        let signals = ShutdownSignals.install(on: gateway.group.loops[0], whileStarting: interruption.interrupt) {
            signal in
            logger.log(
                .info, "shutting down",
                ["signal": String(signal), "deadline_s": String(configuration.shutdownTimeoutSeconds)])
            Task {
                await gateway.shutdown()
                logger.log(.info, "stopped")
                stopped.hand(())
            }
        } exitAtOnce: { signal in
            logger.log(.warning, "second signal: exiting at once", ["signal": String(signal)])
            exit(1)
        }
        pthread_sigmask(SIG_UNBLOCK, &shutdownSignals, nil)
        // Stops what started before serving, so that the process exits with no loop
        // running: exit() while loop threads run raced with their work (SIGABRT).
        func stopBeforeServing(_ status: Int32) -> Int32 {
            try? runBlocking { await gateway.shutdown() }
            return status
        }
        let check = gateway.waitForDatabase(seconds: configuration.databaseWaitSeconds, interruption: interruption)
        guard check == .ready else {
            if interruption.isInterrupted {
                logger.log(.info, "stopped before serving", ["reason": check.advice])
                return stopBeforeServing(0)
            }
            logger.log(.error, "could not start", ["error": check.advice])
            return stopBeforeServing(1)
        }
        let address: SocketAddress
        do {
            address = try gateway.start()
        } catch {
            let (message, status) = startFailure(error, configuration)
            logger.log(.error, "could not start", ["error": message])
            return stopBeforeServing(status)
        }
        switch gateway.checkListener(seconds: configuration.databaseWaitSeconds, interruption: interruption) {
        case .received:
            break
        case let outcome?:
            logger.log(.error, "could not start", ["error": ListenerProbe.advice(outcome)])
            return stopBeforeServing(1)
        case nil:
            if interruption.isInterrupted {
                logger.log(.info, "stopped before serving", ["reason": "the listener had not connected"])
                return stopBeforeServing(0)
            }
            logger.log(
                .error, "could not start",
                [
                    "error": "the listener did not connect within \(configuration.databaseWaitSeconds) s: check "
                        + "FERRY_LISTEN_DATABASE_URL (--listen-database-url, which defaults to FERRY_DATABASE_URL)"
                ])
            return stopBeforeServing(1)
        }
        logger.log(
            .info, "serving",
            [
                "listen": address.description, "threads": String(configuration.threads),
                "version": Ferry.version, "commit": Ferry.commit ?? "unknown",
            ])
        signals.loop.execute { signals.value.serving() }
        withExtendedLifetime(signals) { _ = stopped.wait() }
        return 0
    }
}

/// What to log when the server could not start, and the exit status: 2 for an
/// address this process cannot serve (a setting to change), 1 otherwise.
func startFailure(_ error: any Error, _ configuration: GatewayConfiguration) -> (message: String, status: Int32) {
    let listen =
        configuration.host.contains(":")
        ? "[\(configuration.host)]:\(configuration.port)" : "\(configuration.host):\(configuration.port)"
    guard let error = error as? LoopError else { return ("\(error)", 1) }
    switch -error.code {
    case EADDRINUSE:
        return (
            "\(listen) is already served by another process: stop it, choose another --listen / FERRY_LISTEN, "
                + "or pass --share-port / FERRY_SHARE_PORT=true to share the address with it on purpose", 2
        )
    case EADDRNOTAVAIL:
        return ("\(listen) is not an address of this machine (--listen / FERRY_LISTEN)", 2)
    case EACCES:
        return (
            "may not bind \(listen): ports below 1024 need root or CAP_NET_BIND_SERVICE (--listen / FERRY_LISTEN)", 2
        )
    default:
        return ("\(error)", 1)
    }
}

/// Ends `serve`'s wait for its database early: set by a signal that arrives before
/// the gateway serves. Any thread.
final class StartupInterruption: Sendable {
    private let interrupted = Atomic<Bool>(false)
    private let wakeUp = DispatchSemaphore(value: 0)

    /// Whether a signal came.
    var isInterrupted: Bool { interrupted.load(ordering: .acquiring) }

    /// Records the signal and wakes a ``sleep(_:)`` in progress.
    @Sendable func interrupt(_ signal: Int32) {
        interrupted.store(true, ordering: .releasing)
        wakeUp.signal()
    }

    /// Waits `duration`, or less when interrupted.
    func sleep(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        _ = wakeUp.wait(timeout: .now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)))
    }
}
