-- 0004_account_functions_keep_their_plans: the account functions written in plain SQL
-- become PL/pgSQL, with the same signatures, results and grants.
--
-- Why: PostgreSQL cannot inline a SECURITY DEFINER SQL function, and it parses and plans
-- such a function's body again on every call. PL/pgSQL keeps each statement's plan for
-- the life of the connection, and the gateway's connections are long-lived. bench/auth.sh
-- measured GET /v1/auth/user (ferry.current_account) spending most of its time in that
-- planning.
--
-- Changes (bodies otherwise as in 0002)
--   ferry.current_account()       GET /v1/auth/user, on every call
--   ferry.find_credentials(text)  sign-in
--   ferry.open_session(...)       sign-up and sign-in
--   ferry.announce_revocation()   sign-out, token reuse, deletion
--
-- create or replace keeps each function's owner and grants.

create or replace function ferry.current_account(out user_id uuid, out email text)
language plpgsql security definer set search_path = ''
as $$
begin
    select u.id, u.email into user_id, email
    from ferry.sessions s join ferry.users u on u.id = s.user_id
    where s.id = ferry.session_id() and s.user_id = ferry.uid() and s.revoked_at is null;
end
$$;

create or replace function ferry.find_credentials(p_email text, out user_id uuid, out password_hash text)
language plpgsql stable security definer set search_path = ''
as $$
begin
    select u.id, u.password_hash into user_id, password_hash
    from ferry.users u where pg_catalog.lower(u.email) = pg_catalog.lower(p_email);
end
$$;

create or replace function ferry.open_session(p_user uuid, p_device text, p_refresh_hash text) returns uuid
language plpgsql security definer set search_path = ''
as $$
declare
    opened uuid;
begin
    insert into ferry.sessions (user_id, device_id) values (p_user, p_device) returning id into opened;
    insert into ferry.refresh_tokens (token_hash, session_id) values (p_refresh_hash, opened);
    return opened;
end
$$;

create or replace function ferry.announce_revocation(p_session uuid, p_user uuid, p_reason text) returns void
language plpgsql security definer set search_path = ''
as $$
begin
    insert into ferry.revocations (session_id, user_id, reason) values (p_session, p_user, p_reason)
        on conflict (session_id) do nothing;
    perform pg_catalog.pg_notify('ferry_revoked', pg_catalog.json_build_object(
        'session', p_session, 'user', p_user, 'reason', p_reason)::text);
end
$$;
