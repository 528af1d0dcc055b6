-- Accounts (docs/PROTOCOL.md "Accounts"): the request's identity, sessions and refresh
-- tokens, sign-up, sign-in and its first-sign-in choice, and the operators' cleanup.
--
-- Functions that run before a caller is known (sign-up, refresh, sign-in, cleanup) are
-- granted to ferry_gateway only, out of reach once a transaction is ferry_client; those
-- a signed-in request calls are granted to ferry_client and act on ferry.uid() and
-- ferry.session_id() alone, never on an id passed as an argument. They are SECURITY
-- DEFINER with an empty search_path (every name qualified); the ones requests call are
-- PL/pgSQL, which keeps each statement's plan for the connection, where a SECURITY
-- DEFINER SQL function is planned again on every call.
--
-- Every registered table with an owner column has the tombstone _deleted; counting
-- skips tombstones, and shared tables (no owner) are never touched here. Revocations
-- are announced with pg_notify('ferry_revoked', '{"session", "user", "reason"}') so
-- that every gateway drops the session from its cache at once.

-- MARK: - The request's identity

-- Set transaction-locally by the gateway (set_config('ferry.user_id', …, true)).
create or replace function ferry.uid() returns uuid
language sql stable parallel safe
as $$ select nullif(pg_catalog.current_setting('ferry.user_id', true), '')::uuid $$;

create or replace function ferry.device_id() returns text
language sql stable parallel safe
as $$ select nullif(pg_catalog.current_setting('ferry.device_id', true), '') $$;

create or replace function ferry.session_id() returns uuid
language sql stable parallel safe
as $$ select nullif(pg_catalog.current_setting('ferry.session_id', true), '')::uuid $$;

comment on function ferry.uid() is
    'The requesting user: set per transaction by the gateway (set_config(''ferry.user_id'', …, true)); RLS policies compare owners with (select ferry.uid())';

-- MARK: - Rows in synced tables

-- Live rows (not tombstones) owned by a user in every registered table.
create or replace function ferry.count_user_rows(p_user uuid) returns bigint
language plpgsql stable security definer set search_path = ''
as $$
declare
    t record;
    n bigint;
    total bigint := 0;
begin
    for t in select table_name, owner_column from ferry.synced_tables where owner_column is not null loop
        execute pg_catalog.format('select count(*) from %s where %I = $1 and not _deleted', t.table_name, t.owner_column)
            into n using p_user;
        total := total + n;
    end loop;
    return total;
end
$$;

-- Deletes every row a user owns in every registered table (tombstones included), for
-- good (ferry.hard_delete, deletes.sql): the user goes with them, and so does every
-- device that could pull a tombstone.
create or replace function ferry.delete_user_rows(p_user uuid) returns void
language plpgsql security definer set search_path = ''
as $$
declare
    t record;
    v_hard text := ferry.hard_delete_begin();
begin
    for t in select table_name, owner_column from ferry.synced_tables where owner_column is not null loop
        execute pg_catalog.format('delete from %s where %I = $1', t.table_name, t.owner_column) using p_user;
    end loop;
    perform ferry.hard_delete_end(v_hard);
end
$$;

-- keep_device: the cloud account's rows become tombstones (its other devices drop them)
-- and the anonymous user's rows move to the cloud account. Where a table's primary key
-- includes the owner, a cloud row under the same key as a moving row is replaced by it
-- (the moved row is a newer version of that key for every device); with the owner as
-- the only key column, the two users' rows share the key whenever both exist. The
-- anonymous user's WatermelonDB timestamps move too, so the device syncs on from its
-- last pull: every row moved or tombstoned here gets a new _stamp, which no earlier
-- snapshot sees. The replaced cloud rows go for good (ferry.hard_delete, deletes.sql):
-- the moved row takes their key with a new _stamp.
create or replace function ferry.move_user_rows(p_from uuid, p_to uuid) returns void
language plpgsql security definer set search_path = ''
as $$
declare
    t record;
    key_match text;
    v_hard text := ferry.hard_delete_begin();
begin
    for t in select table_name, owner_column from ferry.synced_tables where owner_column is not null loop
        if exists (select from ferry.primary_key(t.table_name) k where k.name = t.owner_column) then
            -- The owner is part of the key: the other key columns (none: every pair matches).
            select coalesce(pg_catalog.string_agg(pg_catalog.format('c.%1$I = a.%1$I', k.name), ' and '), 'true')
                into key_match
                from ferry.primary_key(t.table_name) k
                where k.name <> t.owner_column;
            execute pg_catalog.format(
                'delete from %1$s c using %1$s a where c.%2$I = $1 and a.%2$I = $2 and %3$s',
                t.table_name, t.owner_column, key_match) using p_to, p_from;
        end if;
        execute pg_catalog.format('update %s set _deleted = true where %I = $1 and not _deleted', t.table_name, t.owner_column)
            using p_to;
        execute pg_catalog.format('update %s set %2$I = $2 where %2$I = $1', t.table_name, t.owner_column)
            using p_from, p_to;
    end loop;
    update ferry.watermelon_cursors c set user_id = p_to where c.user_id = p_from;
    perform ferry.hard_delete_end(v_hard);
end
$$;

-- MARK: - Sessions

-- Records a revocation and tells every gateway.
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

-- A new session for a user on a device, with its first refresh token.
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

-- POST /v1/auth/anonymous: a user and a session in one statement. The id names this
-- cluster's shard (functions/shards.sql).
create or replace function ferry.sign_up_anonymous(p_device text, p_refresh_hash text, out user_id uuid, out session_id uuid)
language plpgsql security definer set search_path = ''
as $$
begin
    insert into ferry.users (id) values (ferry.new_user_id()) returning id into user_id;
    session_id := ferry.open_session(user_id, p_device, p_refresh_hash);
end
$$;

-- POST /v1/auth/refresh: rotates a refresh token. A session keeps two tokens at most:
-- its current one and the one it rotated last, which within p_grace of its rotation is
-- answered with the same successor again (status grace, sealed: the successor sealed
-- with that token, which only its holder can open), so a client whose answer was lost,
-- or several refreshing at once, keep the session. Older tokens leave the table; the
-- session's chain (p_chain, the hash of what all its tokens name) still finds the
-- session of one presented again. status: ok (rotated), grace, invalid (unknown),
-- revoked (the session was revoked), or reused (a rotated token after its window, or an
-- older one: the whole session is revoked now).
create or replace function ferry.refresh_session(
    p_token_hash text, p_chain text, p_new_hash text, p_sealed text, p_grace interval,
    out status text, out user_id uuid, out session_id uuid, out device_id text, out email text, out sealed text,
    out email_confirmed boolean
)
language plpgsql security definer set search_path = ''
as $$
declare
    token ferry.refresh_tokens;
    owner ferry.sessions;
begin
    -- Concurrent refreshes of one token queue here; each sees the one before it committed.
    select * into token from ferry.refresh_tokens r where r.token_hash = p_token_hash for update;
    if found then
        select * into owner from ferry.sessions s where s.id = token.session_id for update;
    else
        select * into owner from ferry.sessions s where s.refresh_chain = p_chain for update;
        if not found then
            status := 'invalid';
            return;
        end if;
    end if;
    session_id := owner.id;
    user_id := owner.user_id;
    if owner.revoked_at is not null then
        status := 'revoked';
        return;
    end if;
    if token.token_hash is null or (token.used_at is not null and token.used_at <= now() - p_grace) then
        update ferry.sessions s set revoked_at = now() where s.id = owner.id;
        perform ferry.announce_revocation(owner.id, owner.user_id, 'token_reused');
        status := 'reused';
        return;
    end if;
    if token.used_at is not null then
        sealed := token.sealed_successor;
        status := 'grace';
    else
        delete from ferry.refresh_tokens r where r.session_id = owner.id and r.used_at is not null;
        update ferry.refresh_tokens r set used_at = now(), sealed_successor = p_sealed
            where r.token_hash = p_token_hash;
        insert into ferry.refresh_tokens (token_hash, session_id) values (p_new_hash, owner.id);
        update ferry.sessions s set refresh_chain = coalesce(s.refresh_chain, p_chain) where s.id = owner.id;
        status := 'ok';
    end if;
    update ferry.sessions s set last_seen_at = now() where s.id = owner.id;
    update ferry.users u set last_seen_at = now() where u.id = owner.user_id
        returning u.email, u.email_confirmed into email, email_confirmed;
    device_id := owner.device_id;
end
$$;

-- POST /v1/auth/signin, step 1: the account behind an email (the gateway checks the
-- password on a worker thread, then calls ferry.sign_in). The account that confirmed it
-- when there is one; else the latest of those that linked it unconfirmed (with their
-- password right, the gateway answers 403 email_not_confirmed).
create or replace function ferry.find_credentials(
    p_email text, out user_id uuid, out password_hash text, out email_confirmed boolean
)
language plpgsql stable security definer set search_path = ''
as $$
begin
    select u.id, u.password_hash, u.email_confirmed into user_id, password_hash, email_confirmed
    from ferry.users u where pg_catalog.lower(u.email) = pg_catalog.lower(p_email)
    order by u.email_confirmed desc, u.last_seen_at desc
    limit 1;
end
$$;

-- A first sign-in's end of the device's anonymous user p_user: its sessions revoked (their
-- streams close account_deleted), every row it owns deleted (what is left after a
-- keep_device move, or its tombstones when it had no live row: nothing else would ever
-- delete them), then the user. False when p_user is no anonymous user of this shard (gone
-- already). Across shards the gateway calls it once the account's shard signed the device
-- in (docs/SCALING.md, "The email directory").
create or replace function ferry.delete_anonymous_user(p_user uuid) returns boolean
language plpgsql security definer set search_path = ''
as $$
begin
    perform 1 from ferry.users u where u.id = p_user and u.email is null for update;
    if not found then
        return false;
    end if;
    perform ferry.announce_revocation(s.id, p_user, 'account_deleted')
        from ferry.sessions s where s.user_id = p_user and s.revoked_at is null;
    perform ferry.delete_user_rows(p_user);
    delete from ferry.users u where u.id = p_user;
    return true;
end
$$;

-- Whether p_user is anonymous and how many live rows it owns (both null when there is no
-- such user here): what a first sign-in across shards counts, the device's rows on the
-- device's shard and the account's on the account's. The gateway's, with no caller.
create or replace function ferry.user_rows(p_user uuid, out is_anonymous boolean, out live_rows bigint)
language plpgsql stable security definer set search_path = ''
as $$
begin
    select u.email is null into is_anonymous from ferry.users u where u.id = p_user;
    if found then
        live_rows := ferry.count_user_rows(p_user);
    end if;
end
$$;

-- POST /v1/auth/signin, step 2, after the password checked out. p_anonymous is the user
-- of the device's current anonymous session (null when signing in without one).
-- status: ok, or resolution_required (nothing changed) with both row counts.
create or replace function ferry.sign_in(
    p_user uuid, p_device text, p_refresh_hash text, p_anonymous uuid, p_resolve text,
    out status text, out session_id uuid, out email text, out reset boolean,
    out device_rows bigint, out cloud_rows bigint
)
language plpgsql security definer set search_path = ''
as $$
begin
    reset := false;
    if p_anonymous is not null and p_anonymous <> p_user
        and exists (select from ferry.users u where u.id = p_anonymous and u.email is null)
    then
        -- Both accounts are locked for the decision: a concurrent sign-in or push of either
        -- waits rather than interleaving with the merge.
        perform 1 from ferry.users u where u.id in (p_anonymous, p_user) order by u.id for update;
        device_rows := ferry.count_user_rows(p_anonymous);
        if device_rows > 0 then
            if p_resolve is null then
                cloud_rows := ferry.count_user_rows(p_user);
                status := 'resolution_required';
                return;
            elsif p_resolve = 'keep_cloud' then
                perform ferry.delete_user_rows(p_anonymous);
                reset := true;
            elsif p_resolve = 'keep_device' then
                perform ferry.move_user_rows(p_anonymous, p_user);
            else
                raise exception 'unknown resolve %', p_resolve using errcode = '22023';
            end if;
        end if;
        perform ferry.delete_anonymous_user(p_anonymous);
    end if;
    session_id := ferry.open_session(p_user, p_device, p_refresh_hash);
    update ferry.users u set last_seen_at = now() where u.id = p_user returning u.email into email;
    status := 'ok';
end
$$;

-- MARK: - Signed-in requests (as ferry_client, on the transaction's identity)

-- GET /v1/auth/user. No row when the session was revoked or the user is gone.
create or replace function ferry.current_account(out user_id uuid, out email text, out email_confirmed boolean)
language plpgsql security definer set search_path = ''
as $$
begin
    select u.id, u.email, u.email_confirmed into user_id, email, email_confirmed
    from ferry.sessions s join ferry.users u on u.id = s.user_id
    where s.id = ferry.session_id() and s.user_id = ferry.uid() and s.revoked_at is null;
end
$$;

-- The caller's account, locked for the rest of the transaction (a concurrent change of
-- it waits); all nulls when the caller's session is not open.
create or replace function ferry.locked_caller() returns ferry.users
language plpgsql security definer set search_path = ''
as $$
declare
    account ferry.users;
begin
    select u.* into account from ferry.sessions s join ferry.users u on u.id = s.user_id
        where s.id = ferry.session_id() and s.user_id = ferry.uid() and s.revoked_at is null
        for update of u;
    return account;
end
$$;

-- POST /v1/auth/link: status ok, already_linked, email_in_use (a confirmed account has
-- the email) or revoked. With p_confirm, the email stays unconfirmed and a code
-- (p_code_hash, p_code for its mail, good for p_minutes) is mailed to it; else it is
-- confirmed at once.
create or replace function ferry.link_email(
    p_email text, p_password_hash text, p_confirm boolean, p_code_hash text, p_code text, p_minutes integer
) returns text
language plpgsql security definer set search_path = ''
as $$
declare
    account ferry.users;
begin
    account := ferry.locked_caller();
    if account.id is null then
        return 'revoked';
    end if;
    if account.email is not null then
        return 'already_linked';
    end if;
    if exists (
        select from ferry.users u where pg_catalog.lower(u.email) = pg_catalog.lower(p_email) and u.email_confirmed
    ) then
        return 'email_in_use';
    end if;
    update ferry.users u set email = pg_catalog.lower(p_email), password_hash = p_password_hash,
        email_confirmed = not p_confirm, last_seen_at = now() where u.id = account.id;
    if p_confirm then
        perform ferry.issue_code(account.id, 'confirmation', pg_catalog.lower(p_email), p_code_hash, p_code, p_minutes);
    end if;
    return 'ok';
exception
    when unique_violation then
        return 'email_in_use';
end
$$;

-- POST /v1/auth/signout: revokes the current session. Its refresh tokens stay, so one
-- presented again is answered session_revoked; they can never rotate again
-- (refresh_session checks the session first) and go with the user (on delete cascade).
create or replace function ferry.sign_out() returns void
language plpgsql security definer set search_path = ''
as $$
declare
    revoked uuid;
begin
    update ferry.sessions s set revoked_at = now()
        where s.id = ferry.session_id() and s.user_id = ferry.uid() and s.revoked_at is null
        returning s.id into revoked;
    if revoked is not null then
        perform ferry.announce_revocation(revoked, ferry.uid(), 'signed_out');
    end if;
end
$$;

-- DELETE /v1/account: the user's rows in every synced table, its sessions, the user.
-- status: ok (also when the user is already gone: a retry after a lost answer) or
-- revoked (the session was signed out while the account lives).
create or replace function ferry.delete_account() returns text
language plpgsql security definer set search_path = ''
as $$
declare
    me uuid := ferry.uid();
begin
    perform 1 from ferry.users u where u.id = me for update;
    if not found then
        return 'ok';
    end if;
    if not exists (
        select from ferry.sessions s where s.id = ferry.session_id() and s.user_id = me and s.revoked_at is null
    ) then
        return 'revoked';
    end if;
    perform ferry.delete_user_rows(me);
    perform ferry.announce_revocation(s.id, me, 'account_deleted')
        from ferry.sessions s where s.user_id = me and s.revoked_at is null;
    delete from ferry.users u where u.id = me;
    return 'ok';
end
$$;

-- MARK: - Operators

-- ferry cleanup-anonymous: deletes up to p_batch anonymous users not seen for
-- p_inactive, with their rows; returns how many. Each call is one transaction, so a
-- run can be interrupted and resumed. Also forgets revocations older than two days
-- (far beyond any access token's life).
create or replace function ferry.cleanup_anonymous(p_inactive interval, p_batch integer) returns integer
language plpgsql security definer set search_path = ''
as $$
declare
    victim uuid;
    deleted integer := 0;
begin
    for victim in
        select u.id from ferry.users u
        where u.email is null and u.last_seen_at < now() - p_inactive
        order by u.last_seen_at
        limit p_batch
        for update skip locked
    loop
        perform ferry.delete_user_rows(victim);
        delete from ferry.users u where u.id = victim;
        deleted := deleted + 1;
    end loop;
    delete from ferry.revocations r where r.revoked_at < now() - interval '2 days';
    return deleted;
end
$$;

-- How many anonymous users cleanup would delete (ferry cleanup-anonymous --dry-run).
create or replace function ferry.count_inactive_anonymous(p_inactive interval) returns bigint
language sql stable security definer set search_path = ''
as $$
    select count(*) from ferry.users u where u.email is null and u.last_seen_at < now() - p_inactive;
$$;

-- Sessions revoked since a time: a gateway reloads its cache with these after its
-- LISTEN connection was down.
create or replace function ferry.recent_revocations(p_since timestamptz, out session_id uuid, out revoked_at timestamptz)
returns setof record
language sql stable security definer set search_path = ''
as $$
    select r.session_id, r.revoked_at from ferry.revocations r where r.revoked_at >= p_since;
$$;

-- Whether user p_user of this shard has p_email as its own (confirmed too, when
-- p_confirmed): what settles the email directory's pending claim of (this shard, p_user)
-- (docs/SCALING.md, "The email directory"). The gateway's, with no caller.
create or replace function ferry.user_has_email(p_user uuid, p_email text, p_confirmed boolean) returns boolean
language sql stable security definer set search_path = ''
as $$
    select exists (
        select from ferry.users u
        where u.id = p_user and pg_catalog.lower(u.email) = pg_catalog.lower(p_email)
            and (u.email_confirmed or not p_confirmed)
    )
$$;

-- MARK: - Grants

revoke all on function
    ferry.count_user_rows(uuid), ferry.delete_user_rows(uuid), ferry.move_user_rows(uuid, uuid),
    ferry.announce_revocation(uuid, uuid, text), ferry.open_session(uuid, text, text),
    ferry.sign_up_anonymous(text, text), ferry.refresh_session(text, text, text, text, interval), ferry.find_credentials(text),
    ferry.delete_anonymous_user(uuid), ferry.user_rows(uuid),
    ferry.sign_in(uuid, text, text, uuid, text), ferry.current_account(), ferry.locked_caller(),
    ferry.link_email(text, text, boolean, text, text, integer),
    ferry.sign_out(), ferry.delete_account(), ferry.cleanup_anonymous(interval, integer),
    ferry.count_inactive_anonymous(interval), ferry.recent_revocations(timestamptz),
    ferry.user_has_email(uuid, text, boolean)
from public;

grant execute on function
    ferry.sign_up_anonymous(text, text), ferry.refresh_session(text, text, text, text, interval), ferry.find_credentials(text),
    ferry.sign_in(uuid, text, text, uuid, text), ferry.delete_anonymous_user(uuid), ferry.user_rows(uuid),
    ferry.cleanup_anonymous(interval, integer),
    ferry.count_inactive_anonymous(interval), ferry.recent_revocations(timestamptz),
    ferry.user_has_email(uuid, text, boolean)
to ferry_gateway;

grant execute on function
    ferry.current_account(), ferry.link_email(text, text, boolean, text, text, integer), ferry.sign_out(), ferry.delete_account()
to ferry_client;
