-- The mail queue (0011_mail_and_codes.sql; docs/OPERATIONS.md "Mail"): what requests add
-- and what each gateway's sender claims, then records as sent or failed. Every function
-- is SECURITY DEFINER with an empty search_path; the sender's are granted to
-- ferry_gateway, ferry.enqueue_mail to nobody (the account functions call it).

-- Adds a mail carrying `p_code`, good for p_minutes; due at once.
create or replace function ferry.enqueue_mail(p_kind text, p_recipient text, p_code text, p_minutes integer)
returns void
language plpgsql security definer set search_path = ''
as $$
begin
    insert into ferry.mail_queue (kind, recipient, code, valid_minutes, expires_at)
        values (p_kind, p_recipient, p_code, p_minutes, now() + make_interval(mins => p_minutes));
end
$$;

-- Claims at most p_batch due mails for p_lease_seconds: rows another gateway holds are
-- skipped, and a claimed row is not due again until its lease ends, so a mail is sent by
-- one sender at a time; a sender that dies mid-send leaves it to be sent again after
-- the lease. Mails whose code has expired are deleted unsent first.
create or replace function ferry.claim_mail(p_batch integer, p_lease_seconds integer)
returns table (id bigint, kind text, recipient text, code text, valid_minutes integer, attempts integer)
language sql security definer set search_path = ''
as $$
    delete from ferry.mail_queue m
        where m.id in (select e.id from ferry.mail_queue e where e.expires_at <= now() for update skip locked);
    with due as (
        select m.id from ferry.mail_queue m
        where m.next_attempt_at <= now() and m.expires_at > now()
        order by m.next_attempt_at
        limit p_batch
        for update skip locked
    )
    update ferry.mail_queue m
        set next_attempt_at = now() + make_interval(secs => p_lease_seconds), attempts = m.attempts + 1
        from due where m.id = due.id
        returning m.id, m.kind, m.recipient, m.code, m.valid_minutes, m.attempts;
$$;

-- The relay took the mail: it leaves the queue (and its code with it).
create or replace function ferry.mail_sent(p_id bigint) returns void
language sql security definer set search_path = ''
as $$
    delete from ferry.mail_queue m where m.id = p_id;
$$;

-- The relay refused or could not be reached: the mail is due again after a backoff that
-- doubles with each attempt, from 5 s to at most 5 minutes, with a fifth of jitter so
-- that mails queued together do not retry together.
create or replace function ferry.mail_failed(p_id bigint, p_error text) returns void
language sql security definer set search_path = ''
as $$
    update ferry.mail_queue m
        set last_error = pg_catalog.left(p_error, 500),
            next_attempt_at = now() + make_interval(
                secs => least(5 * pg_catalog.power(2, least(m.attempts - 1, 16)), 300) * (1 + pg_catalog.random() / 5))
        where m.id = p_id;
$$;

revoke all on function
    ferry.enqueue_mail(text, text, text, integer), ferry.claim_mail(integer, integer), ferry.mail_sent(bigint),
    ferry.mail_failed(bigint, text)
from public;

grant execute on function ferry.claim_mail(integer, integer), ferry.mail_sent(bigint), ferry.mail_failed(bigint, text)
to ferry_gateway;
