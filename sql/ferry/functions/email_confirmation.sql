-- Email confirmation (docs/PROTOCOL.md "Accounts"; 0012_email_confirmation.sql): link
-- leaves the email unconfirmed and mails a code (ferry.link_email, accounts.sql); these
-- confirm it with the code, or mail a new one. Both run as ferry_client, on the
-- caller's identity. Codes are ferry.account_codes' 'confirmation' ones
-- (account_recovery.sql).

-- POST /v1/auth/confirm: with the caller's live code, its email is confirmed, unless
-- another account confirmed the same email first: then this account's link is undone
-- (it is anonymous again, and may link another email). status: ok (also when already
-- confirmed: a retry after a lost answer), invalid_code, email_in_use, anonymous (no
-- email to confirm) or revoked.
create or replace function ferry.confirm_email(p_code_hash text, out status text, out email text)
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
    email := account.email;
    if account.email is null then
        status := 'anonymous';
    elsif account.email_confirmed then
        status := 'ok';
    elsif not ferry.redeem_code(account.id, 'confirmation', p_code_hash) then
        status := 'invalid_code';
    else
        -- Concurrent confirmations of one email queue on the index entry; the second
        -- fails here, or sees the first's row.
        begin
            update ferry.users u set email_confirmed = true, last_seen_at = now() where u.id = account.id;
            status := 'ok';
        exception
            when unique_violation then
                status := 'email_in_use';
        end;
        if status = 'email_in_use' then
            update ferry.users u set email = null, password_hash = null, last_seen_at = now()
                where u.id = account.id;
            email := null;
        end if;
    end if;
end
$$;

-- POST /v1/auth/confirm/resend: a new code for the caller's unconfirmed email, replacing
-- the one out, and its mail. status: ok, confirmed (nothing to send), anonymous or
-- revoked.
create or replace function ferry.resend_confirmation(p_code_hash text, p_code text, p_minutes integer)
returns text
language plpgsql security definer set search_path = ''
as $$
declare
    account ferry.users;
begin
    account := ferry.locked_caller();
    if account.id is null then
        return 'revoked';
    elsif account.email is null then
        return 'anonymous';
    elsif account.email_confirmed then
        return 'confirmed';
    end if;
    perform ferry.issue_code(account.id, 'confirmation', account.email, p_code_hash, p_code, p_minutes);
    return 'ok';
end
$$;

revoke all on function ferry.confirm_email(text), ferry.resend_confirmation(text, text, integer) from public;
grant execute on function ferry.confirm_email(text), ferry.resend_confirmation(text, text, integer) to ferry_client;
