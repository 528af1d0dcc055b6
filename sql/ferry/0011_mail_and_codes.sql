-- Mail and one-time codes (docs/PROTOCOL.md "Accounts": password change and reset;
-- docs/OPERATIONS.md "Mail"). The functions are in functions/mail_queue.sql and
-- functions/account_recovery.sql.
--
-- Mail is never sent inside a request: a request's transaction adds a row to
-- ferry.mail_queue, and every gateway's sender claims due rows (FOR UPDATE SKIP LOCKED,
-- then a lease in next_attempt_at, so two gateways never send one mail), hands them to
-- the operator's SMTP relay and deletes each once the relay took it. A row holds the
-- one-time code its mail carries (the mail is rendered from the operator's templates
-- when sent), so it lives no longer than the code: rows past expires_at are dropped
-- unsent.

create table ferry.mail_queue (
    id bigint generated always as identity primary key,
    -- The template: recovery (a password reset) or confirmation (an email confirmation).
    kind text not null check (kind in ('recovery', 'confirmation')),
    recipient text not null,
    code text not null,
    -- How long the code is good for, as the mail says it.
    valid_minutes integer not null,
    expires_at timestamptz not null,
    -- Sends tried so far; the next is due at next_attempt_at (a claim's lease, or the
    -- backoff after a failure).
    attempts integer not null default 0,
    next_attempt_at timestamptz not null default now(),
    last_error text,
    created_at timestamptz not null default now()
);
create index mail_queue_due on ferry.mail_queue (next_attempt_at);

-- One live code per user and purpose; only its SHA-256 is kept. A new request replaces
-- the old code; a right code is deleted when used; 5 wrong ones delete it too.
create table ferry.account_codes (
    user_id uuid not null references ferry.users on delete cascade,
    purpose text not null check (purpose in ('recovery', 'confirmation')),
    code_hash text not null,
    expires_at timestamptz not null,
    failed_attempts integer not null default 0,
    created_at timestamptz not null default now(),
    primary key (user_id, purpose)
);

-- A password change or reset revokes the account's sessions.
alter table ferry.revocations drop constraint revocations_reason_check;
alter table ferry.revocations add constraint revocations_reason_check
    check (reason in ('signed_out', 'token_reused', 'account_deleted', 'password_changed'));

revoke all on ferry.mail_queue, ferry.account_codes from public;
