-- Passwords (docs/PROTOCOL.md "Accounts"): a signed-in change, and a reset by a code
-- mailed to the account's email. Either one ends every session the account had (the
-- revocation is announced with the reason password_changed, so streams close
-- session_revoked) and opens one new session, for the device that asked.
--
-- One-time codes live in ferry.account_codes (0011_mail_and_codes.sql), one per user
-- and purpose, as the SHA-256 the gateway computed; the code itself travels only in the
-- mail queue row that carries it (ferry.enqueue_mail, mail_queue.sql). A code is good
-- once, until its expiry; every wrong one counts, and the fifth voids it.

-- MARK: - Codes

-- A new code for a user and purpose, replacing any earlier one, and its mail.
create or replace function ferry.issue_code(
    p_user uuid, p_purpose text, p_email text, p_code_hash text, p_code text, p_minutes integer
) returns void
language plpgsql security definer set search_path = ''
as $$
begin
    insert into ferry.account_codes (user_id, purpose, code_hash, expires_at)
        values (p_user, p_purpose, p_code_hash, now() + make_interval(mins => p_minutes))
        on conflict (user_id, purpose) do update
            set code_hash = excluded.code_hash, expires_at = excluded.expires_at, failed_attempts = 0,
                created_at = now();
    perform ferry.enqueue_mail(p_purpose, p_email, p_code, p_minutes);
end
$$;

-- Whether p_code_hash is the user's live code for p_purpose, leaving a right code live.
-- A wrong code counts against it, and the fifth deletes it; an expired one is deleted.
-- The row is locked, so concurrent guesses count one by one.
create or replace function ferry.code_matches(p_user uuid, p_purpose text, p_code_hash text) returns boolean
language plpgsql security definer set search_path = ''
as $$
declare
    live ferry.account_codes;
begin
    select * into live from ferry.account_codes c where c.user_id = p_user and c.purpose = p_purpose for update;
    if not found then
        return false;
    end if;
    if live.expires_at <= now() then
        delete from ferry.account_codes c where c.user_id = p_user and c.purpose = p_purpose;
        return false;
    end if;
    if live.code_hash <> p_code_hash then
        if live.failed_attempts + 1 >= 5 then
            delete from ferry.account_codes c where c.user_id = p_user and c.purpose = p_purpose;
        else
            update ferry.account_codes c set failed_attempts = c.failed_attempts + 1
                where c.user_id = p_user and c.purpose = p_purpose;
        end if;
        return false;
    end if;
    return true;
end
$$;

-- Whether p_code_hash is the user's live code for p_purpose (ferry.code_matches), used up
-- when it is, so a code is redeemed once.
create or replace function ferry.redeem_code(p_user uuid, p_purpose text, p_code_hash text) returns boolean
language plpgsql security definer set search_path = ''
as $$
begin
    if not ferry.code_matches(p_user, p_purpose, p_code_hash) then
        return false;
    end if;
    delete from ferry.account_codes c where c.user_id = p_user and c.purpose = p_purpose;
    return true;
end
$$;

-- Sets a user's password hash and ends every session it has; returns a new session on
-- p_device with its first refresh token. Any reset code still out is void.
create or replace function ferry.replace_password(
    p_user uuid, p_password_hash text, p_device text, p_refresh_hash text
) returns uuid
language plpgsql security definer set search_path = ''
as $$
begin
    update ferry.users u set password_hash = p_password_hash, last_seen_at = now() where u.id = p_user;
    delete from ferry.account_codes c where c.user_id = p_user and c.purpose = 'recovery';
    perform ferry.announce_revocation(s.id, p_user, 'password_changed')
        from ferry.sessions s where s.user_id = p_user and s.revoked_at is null;
    update ferry.sessions s set revoked_at = now() where s.user_id = p_user and s.revoked_at is null;
    return ferry.open_session(p_user, p_device, p_refresh_hash);
end
$$;

-- MARK: - A signed-in change (as ferry_client, on the transaction's identity)

-- POST /v1/auth/password, step 1: the caller's email and password hash, to check the
-- current password against. status: ok, anonymous (no email, so no password) or revoked
-- (the session is not open).
create or replace function ferry.caller_credentials(out status text, out email text, out password_hash text)
language plpgsql security definer set search_path = ''
as $$
begin
    select u.email, u.password_hash into email, password_hash
        from ferry.sessions s join ferry.users u on u.id = s.user_id
        where s.id = ferry.session_id() and s.user_id = ferry.uid() and s.revoked_at is null;
    if not found then
        status := 'revoked';
    elsif email is null then
        status := 'anonymous';
    else
        status := 'ok';
    end if;
end
$$;

-- POST /v1/auth/password, step 2, after the current password checked out against
-- p_checked_hash: the new hash, every session ended, a new one on the caller's device.
-- status: ok, revoked, or changed (the password changed since step 1; nothing done).
create or replace function ferry.change_password(
    p_checked_hash text, p_new_hash text, p_refresh_hash text,
    out status text, out session_id uuid, out email text, out email_confirmed boolean
)
language plpgsql security definer set search_path = ''
as $$
declare
    account ferry.users;
begin
    account := ferry.locked_caller();
    if account.id is null then
        status := 'revoked';
        return;
    end if;
    if account.password_hash is distinct from p_checked_hash then
        status := 'changed';
        return;
    end if;
    session_id := ferry.replace_password(account.id, p_new_hash, ferry.device_id(), p_refresh_hash);
    email := account.email;
    email_confirmed := account.email_confirmed;
    status := 'ok';
end
$$;

-- MARK: - A reset by mail (as the gateway: no caller)

-- POST /v1/auth/recover: a code for the account with p_email, mailed to it; nothing when
-- no account has that email confirmed (the gateway answers the same either way).
create or replace function ferry.request_password_reset(
    p_email text, p_code_hash text, p_code text, p_minutes integer
) returns void
language plpgsql security definer set search_path = ''
as $$
declare
    target uuid;
begin
    select u.id into target from ferry.users u
        where pg_catalog.lower(u.email) = pg_catalog.lower(p_email) and u.email_confirmed;
    if found then
        perform ferry.issue_code(target, 'recovery', pg_catalog.lower(p_email), p_code_hash, p_code, p_minutes);
    end if;
end
$$;

-- POST /v1/auth/recover/confirm, step 1, before the new password is hashed: whether
-- p_code_hash is the live reset code of the account with p_email (a wrong one counts
-- against the code; a right one stays live for step 2).
create or replace function ferry.check_reset_code(p_email text, p_code_hash text) returns boolean
language plpgsql security definer set search_path = ''
as $$
declare
    target uuid;
begin
    select u.id into target from ferry.users u
        where pg_catalog.lower(u.email) = pg_catalog.lower(p_email) and u.email_confirmed;
    return found and ferry.code_matches(target, 'recovery', p_code_hash);
end
$$;

-- POST /v1/auth/recover/confirm, step 2: with the right live code, the new password hash, every
-- session of the account ended and a new one on p_device. status: ok or invalid_code
-- (no such account, no live code, or a wrong one, which counts against the code).
create or replace function ferry.reset_password(
    p_email text, p_code_hash text, p_new_hash text, p_device text, p_refresh_hash text,
    out status text, out user_id uuid, out session_id uuid, out email text
)
language plpgsql security definer set search_path = ''
as $$
declare
    target ferry.users;
begin
    select u.* into target from ferry.users u
        where pg_catalog.lower(u.email) = pg_catalog.lower(p_email) and u.email_confirmed
        for update;
    if not found or not ferry.redeem_code(target.id, 'recovery', p_code_hash) then
        status := 'invalid_code';
        return;
    end if;
    session_id := ferry.replace_password(target.id, p_new_hash, p_device, p_refresh_hash);
    user_id := target.id;
    email := target.email;
    status := 'ok';
end
$$;

-- MARK: - Grants

revoke all on function
    ferry.issue_code(uuid, text, text, text, text, integer), ferry.code_matches(uuid, text, text),
    ferry.redeem_code(uuid, text, text), ferry.check_reset_code(text, text),
    ferry.replace_password(uuid, text, text, text), ferry.caller_credentials(),
    ferry.change_password(text, text, text), ferry.request_password_reset(text, text, text, integer),
    ferry.reset_password(text, text, text, text, text)
from public;

grant execute on function
    ferry.request_password_reset(text, text, text, integer), ferry.check_reset_code(text, text),
    ferry.reset_password(text, text, text, text, text)
to ferry_gateway;

grant execute on function ferry.caller_credentials(), ferry.change_password(text, text, text) to ferry_client;
