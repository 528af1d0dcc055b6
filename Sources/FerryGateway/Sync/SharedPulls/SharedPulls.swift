import FerryAuth
import FerryLoop
import FerryPostgres
import Foundation

/// Answers the shared part of pulls from one loop's ``SharedChangeCache``, and keeps the
/// cache current (docs/ARCHITECTURE.md, "Shared-change storms"). Loop thread only.
///
/// A pull is decided only once the loop has heard every cue committed before the pull
/// arrived, and read every shared change those cues announced: a device that was cued
/// (through this gateway's stream or another's) then finds what it was cued for. Two
/// round trips make sure of it, each shared by every pull that waits for it:
/// - the **barrier** (``SendQueuedCuesThenNotify``): the cues pushes queued are sent, then
///   a `NOTIFY` on the process's private channel, after the pull arrived; it comes back
///   through the listener behind every notification committed before it (PostgreSQL
///   delivers them in commit order), so once it is back the loop has taken in those cues
///   (``CueBatcher`` delivers both in order), a push's that the device made just before
///   its pull included;
/// - the **refresh** (``SharedChanges``), when a `shared` table's cue came since the last
///   one began (or none was read yet): the shared rows changed since the cache's position.
/// A pull that waits longer than ``waitMilliseconds`` (`--shared-pull-wait-ms`; the
/// listener is down, the database slow) goes to PostgreSQL like any other.
final class SharedPulls {
    /// How long a pull waits for its barrier and refresh before PostgreSQL answers it.
    let waitMilliseconds: UInt64
    /// The least time between two barriers of a loop: pulls that arrive meanwhile share
    /// the next one. A barrier costs PostgreSQL about a quarter of a pull; in a storm of
    /// pulls this bounds them to a hundred a second per loop, for 10 ms more per pull.
    static let barrierIntervalMilliseconds: UInt64 = 10
    /// The identity a refresh reads as: `ferry_client`, nobody's user. Shared tables'
    /// read policy lets every client read every row (``SharedChangeCache/Refresh/isOpen``).
    static let reader = Identity(
        userID: "00000000-0000-0000-0000-000000000000", sessionID: "00000000-0000-0000-0000-000000000000",
        deviceID: "-", isAnonymous: true)

    /// This process's private channel for barriers (``newChannel()``), which its listener
    /// listens to.
    let channel: String
    private let loop: EventLoop
    private let pool: PostgresPool
    private let logger: Logger
    /// The barrier payloads of this loop start with it; the others' are not for it.
    private let tokenPrefix: String
    private(set) var cache = SharedChangeCache()
    /// A cue of a `shared` table came since the last refresh was sent, or none was sent.
    private var isStale = true
    private var sequence: UInt64 = 0
    /// The barrier in flight: its payload, who waits for it, its deadline.
    private var barrier: (token: String, waiting: [Waiter], deadline: FerryLoop.Timer)?
    /// Those who arrived after it was sent: the next barrier is theirs.
    private var nextBarrier: [Waiter] = []
    /// When the last barrier was sent (the loop's clock), and the timer that sends the
    /// next one once the interval has passed.
    private var lastBarrierAt: UInt64?
    private var barrierTimer: FerryLoop.Timer?
    private var isRefreshing = false
    /// Whether the listener listens: only a read sent while it does can show which own
    /// changes it heard.
    private var isListening = false
    /// Those whose barrier came back and who wait for a refresh.
    private var afterRefresh: [Waiter] = []
    private var isClosed = false

    /// Called with true once the cache is current for the pull that waits, false when it
    /// could not be made so in time.
    typealias Waiter = (Bool) -> Void

    /// A channel name no other process uses.
    static func newChannel() -> String {
        "ferry_sync_" + String(UInt64.random(in: .min ... .max), radix: 16)
    }

    init(
        loop: EventLoop, loopIndex: Int, pool: PostgresPool, channel: String, waitMilliseconds: UInt64,
        logger: Logger
    ) {
        self.loop = loop
        self.pool = pool
        self.channel = channel
        self.waitMilliseconds = waitMilliseconds
        self.logger = logger
        tokenPrefix = "\(loopIndex)."
    }

    // MARK: - Pulls

    /// Calls `completion` on the loop with what to do with `user`'s pull of `limit` rows
    /// from `cursor`, once the cache is current for it.
    func decide(
        _ cursor: SettledPullCursor, user: UUID, limit: Int,
        _ completion: @escaping (SharedChangeCache.Decision) -> Void
    ) {
        loop.preconditionInEventLoop()
        // Only a pull that may have shared news waits for a barrier: memory holds rows its
        // cursor has not seen, or a shared table's cue came and is not read yet. Any other
        // goes to PostgreSQL at once, whose answer is right whatever the barrier would show
        // (so does one whose own changes the loop already heard of, or whose cursor is too
        // old): the pulls of a quiet day pay nothing for this.
        guard !isClosed, isStale || isRefreshing || cache.hasNews(for: cursor), cache.mayAnswer(cursor, user: user)
        else {
            return completion(.database)
        }
        nextBarrier.append { [weak self] isCurrent in
            guard isCurrent, let self else { return completion(.database) }
            completion(self.cache.decide(cursor, user: user, limit: limit))
        }
        if barrier == nil { sendBarrierSoon() }
    }

    /// Sends the next barrier now, or once ``barrierIntervalMilliseconds`` have passed since
    /// the last.
    private func sendBarrierSoon() {
        guard barrierTimer == nil else { return }
        let now = loop.now
        if let last = lastBarrierAt, now < last + Self.barrierIntervalMilliseconds {
            barrierTimer = loop.schedule(after: last + Self.barrierIntervalMilliseconds - now) { [weak self] in
                guard let self else { return }
                barrierTimer = nil
                if barrier == nil && !nextBarrier.isEmpty && !isClosed { sendBarrier() }
            }
        } else {
            sendBarrier()
        }
    }

    private func sendBarrier() {
        lastBarrierAt = loop.now
        sequence += 1
        let token = tokenPrefix + String(sequence)
        let deadline = loop.schedule(after: waitMilliseconds) { [weak self] in
            self?.barrierEnded(token, reached: false)
        }
        barrier = (token, nextBarrier, deadline)
        nextBarrier = []
        pool.run(SendQueuedCuesThenNotify(channel: channel, payload: token)) { [weak self] result in
            if case .failure = result { self?.barrierEnded(token, reached: false) }
        }
    }

    private func barrierEnded(_ token: String, reached: Bool) {
        guard let barrier, barrier.token == token else { return }
        self.barrier = nil
        barrier.deadline.close()
        if reached {
            afterRefresh += barrier.waiting
            if isStale || isRefreshing || cache.ownHorizon == nil {
                if !isRefreshing { refresh() }
            } else {
                answerCurrent()
            }
        } else {
            for waiter in barrier.waiting { waiter(false) }
        }
        if !nextBarrier.isEmpty && !isClosed { sendBarrierSoon() }
    }

    private func refresh() {
        isRefreshing = true
        isStale = false
        let query = SharedChanges(since: cache.position?.text)
        // A read sent while nobody listens must not set the cache's horizon.
        let generation = isListening ? cache.generation : -1
        pool.pipeline([Self.reader.statement(timeout: pool.statementTimeoutSetting), query.statement]) {
            [weak self] outcome in
            guard let self else { return }
            isRefreshing = false
            switch SharedChanges.decode(outcome.map { $0[1] }) {
            case .success(var read):
                read.generation = generation
                read.isIncremental = query.since != nil
                cache.apply(read)
                if !isClosed && (isStale || (cache.ownHorizon == nil && isListening)) { return refresh() }
                answerCurrent()
            case .failure(let failure):
                isStale = true
                logger.log(.warning, "could not read the shared tables' changes", ["error": failure.description])
                let waiting = afterRefresh
                afterRefresh = []
                for waiter in waiting { waiter(false) }
            }
        }
    }

    private func answerCurrent() {
        let waiting = afterRefresh
        afterRefresh = []
        for waiter in waiting { waiter(true) }
    }

    // MARK: - What the listener heard

    /// Takes in a batch of cues, before the streams are cued.
    func noteCues(_ cues: [Cue]) {
        for cue in cues {
            switch cue.audience {
            case .everyone: isStale = true
            case .user(let user): cache.noteOwnChange(of: user, xid: cue.xid)
            }
        }
    }

    /// A barrier payload came back through the listener (any loop's: each takes its own).
    func barrierReached(_ token: String) {
        guard token.hasPrefix(tokenPrefix) else { return }
        barrierEnded(token, reached: true)
    }

    /// The listener connected or lost its connection: cues may have been missed. Once it
    /// listens again, a read sets the horizon at once, before any pull asks.
    func listenerChanged(connected: Bool) {
        cache.listenerReset()
        isListening = connected
        isStale = true
        if connected && !isRefreshing && !isClosed { refresh() }
    }

    /// Answers every waiting pull "to PostgreSQL" and takes no more.
    func close() {
        isClosed = true
        let waiting = (barrier?.waiting ?? []) + nextBarrier + afterRefresh
        barrier?.deadline.close()
        barrier = nil
        barrierTimer?.close()
        barrierTimer = nil
        nextBarrier = []
        afterRefresh = []
        for waiter in waiting { waiter(false) }
    }
}
