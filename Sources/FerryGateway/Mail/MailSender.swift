import FerryLoop
import FerryPostgres
import Foundation

/// The gateway's mail sender (`FERRY_SMTP_URL`): on one loop, every
/// ``pollMilliseconds``, claims the due mails of `ferry.mail_queue` (``ClaimMail``: rows
/// another gateway holds are skipped, and each claimed row is leased to this one),
/// renders each from the templates, hands it to the relay on a worker thread of its own,
/// and records the outcome (``MailSent`` deletes the row; ``MailFailed`` sets its
/// backoff). Requests only add rows; nothing here runs inside one.
///
/// A round still sending when the timer fires again is left alone, so rounds never
/// overlap. Loop thread only (the relay's work runs on ``workers`` and comes back).
final class MailSender {
    /// How often the queue is looked at: a code arrives within about this long of its
    /// request, and an idle gateway costs one statement per interval.
    static let pollMilliseconds: UInt64 = 500
    /// Mails per round.
    static let batchSize = 10
    /// Seconds a claimed mail is this sender's: longer than a send may take (the relay's
    /// timeout), so that no other gateway sends it while this one still might.
    static let leaseSeconds = 120

    private let context: LoopBound<LoopContext>
    private let relay: SMTPRelay
    private let templates: MailTemplates
    private let logger: Logger
    private let workers = BlockingWorkerPool(name: "ferry-mail", threads: 2, queueLimit: batchSize)
    private var timer: FerryLoop.Timer?
    private var isSending = false
    private var isClosed = false

    init(context: LoopBound<LoopContext>, relay: SMTPRelay, templates: MailTemplates, logger: Logger) {
        self.context = context
        self.relay = relay
        self.templates = templates
        self.logger = logger
    }

    /// Arms the timer; the first round comes one interval after start.
    func start() {
        context.loop.preconditionInEventLoop()
        let timer = FerryLoop.Timer(loop: context.loop)
        self.timer = timer
        timer.start(after: Self.pollMilliseconds, repeat: Self.pollMilliseconds) { [weak self] in self?.round() }
    }

    /// Stops the timer and the worker threads; a mail being sent finishes, and one not
    /// yet recorded is sent again by some gateway after its lease.
    func close() {
        isClosed = true
        timer?.close()
        timer = nil
        workers.close()
    }

    private func round() {
        guard !isSending, !isClosed else { return }
        isSending = true
        context.value.pool.run(ClaimMail(batchSize: Self.batchSize, leaseSeconds: Self.leaseSeconds)) { [self] result in
            switch result {
            case .success(let mails) where !mails.isEmpty:
                send(mails[...])
            case .success:
                isSending = false
            case .failure(let failure):
                logger.log(.warning, "could not read the mail queue", ["error": "\(failure)"])
                isSending = false
            }
        }
    }

    /// Sends `mails` one after another, then ends the round.
    private func send(_ mails: ArraySlice<ClaimMail.Mail>) {
        guard let mail = mails.first, !isClosed else {
            isSending = false
            return
        }
        guard let kind = MailTemplates.Kind(rawValue: mail.kind), MailMessage.isDeliverable(mail.recipient) else {
            // Never retried: no template fits, or the address cannot be written as it is.
            logger.log(.error, "dropped an unsendable mail", ["kind": mail.kind, "mail_id": String(mail.id)])
            return record(MailSent(id: mail.id), then: mails.dropFirst())
        }
        let message = templates.message(kind, to: mail.recipient, code: mail.code, minutes: mail.validMinutes)
        let relay = self.relay
        let loop = context.loop
        let sender = LoopBound(self, loop: loop)
        let accepted = workers.submit {
            let outcome = relay.send(message)
            loop.execute { sender.value.sent(mail, outcome, then: mails.dropFirst()) }
        }
        if !accepted { isSending = false }
    }

    private func sent(
        _ mail: ClaimMail.Mail, _ outcome: Result<Void, SMTPRelay.Failure>, then rest: ArraySlice<ClaimMail.Mail>
    ) {
        switch outcome {
        case .success:
            logger.log(.info, "mail sent", ["kind": mail.kind, "mail_id": String(mail.id)])
            record(MailSent(id: mail.id), then: rest)
        case .failure(let failure):
            logger.log(
                .warning, "mail not sent; retrying later",
                [
                    "kind": mail.kind, "mail_id": String(mail.id), "attempt": String(mail.attempts),
                    "error": "\(failure)",
                ])
            record(MailFailed(id: mail.id, error: failure.description), then: rest)
        }
    }

    private func record<Query: DatabaseQuery>(_ query: Query, then rest: ArraySlice<ClaimMail.Mail>) {
        context.value.pool.run(query) { [self] result in
            if case .failure(let failure) = result {
                logger.log(.warning, "could not record a mail's outcome", ["error": "\(failure)"])
            }
            send(rest)
        }
    }
}
