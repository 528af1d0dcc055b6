-- The email directory's functions (docs/SCALING.md, "The email directory"; the table:
-- ../0001_emails.sql). Each is one statement's worth of work, called by a gateway with
-- the directory's own connection; none trusts the caller for more than its (shard, user),
-- which the gateway takes from its own database.

-- Claims `p_email` for (p_shard, p_user): `outcome` 'claimed' (a new pending claim, or
-- this holder's pending claim renewed: `claimed_at` is the claim's time, which
-- directory.settle_claim compares), 'linked' (already this holder's, linked: nothing to
-- settle) or 'in_use' (another (shard, user) holds it, pending or linked).
create or replace function directory.claim(p_email text, p_shard integer, p_user uuid)
returns table (outcome text, claimed_at timestamptz)
language plpgsql security definer set search_path = ''
as $$
declare
    v_email text := pg_catalog.lower(p_email);
    v_row directory.emails;
begin
    for attempt in 1..2 loop
        insert into directory.emails as e (email, shard, user_id, state)
        values (v_email, p_shard, p_user, 'pending')
        on conflict (email) do nothing
        returning e.claimed_at into claimed_at;
        if found then
            outcome := 'claimed';
            return next;
            return;
        end if;
        select * into v_row from directory.emails e where e.email = v_email for update;
        -- Not found: released between the insert and the select; the loop inserts again.
        exit when found;
    end loop;
    if v_row.email is null or v_row.shard <> p_shard or v_row.user_id <> p_user then
        outcome := 'in_use';
    elsif v_row.state = 'linked' then
        outcome := 'linked';
        claimed_at := v_row.claimed_at;
    else
        update directory.emails e set claimed_at = pg_catalog.clock_timestamp() where e.email = v_email
        returning e.claimed_at into claimed_at;
        outcome := 'claimed';
    end if;
    return next;
end
$$;

-- Marks (p_shard, p_user)'s claim of `p_email` linked, once the shard committed: true when
-- the row is theirs (pending or already linked), false when it is not (released, or
-- another's: the caller's shard then holds an email the directory does not give it, which
-- a claim made first never lets happen).
create or replace function directory.mark_linked(p_email text, p_shard integer, p_user uuid) returns boolean
language sql security definer set search_path = ''
as $$
    with marked as (
        update directory.emails e
        set state = 'linked', linked_at = coalesce(e.linked_at, pg_catalog.now())
        where e.email = pg_catalog.lower(p_email) and e.shard = p_shard and e.user_id = p_user
        returning 1
    )
    select exists (select from marked)
$$;

-- Turns (p_shard, p_user)'s linked row back to pending before the shard deletes the
-- account (or drops the email), so that a crash after the shard's commit leaves a pending
-- claim that reconciliation releases, never a linked row of a deleted user. True when
-- the row is theirs.
create or replace function directory.unlink(p_email text, p_shard integer, p_user uuid) returns boolean
language sql security definer set search_path = ''
as $$
    with unlinked as (
        update directory.emails e
        set state = 'pending', linked_at = null, claimed_at = pg_catalog.now()
        where e.email = pg_catalog.lower(p_email) and e.shard = p_shard and e.user_id = p_user
        returning 1
    )
    select exists (select from unlinked)
$$;

-- Deletes (p_shard, p_user)'s row of `p_email`, whatever its state: after the shard
-- deleted the account, or when the shard's own change failed after the claim. True when
-- a row went.
create or replace function directory.release(p_email text, p_shard integer, p_user uuid) returns boolean
language sql security definer set search_path = ''
as $$
    with released as (
        delete from directory.emails e
        where e.email = pg_catalog.lower(p_email) and e.shard = p_shard and e.user_id = p_user
        returning 1
    )
    select exists (select from released)
$$;

-- The owner of `p_email`, linked or pending: no row when the email is free. A sign-in
-- or recovery goes to `shard`; a pending row's shard may not have committed yet, and
-- answers as if the account did not exist until it does.
create or replace function directory.lookup(p_email text)
returns table (shard integer, user_id uuid, state text)
language sql stable security definer set search_path = ''
as $$
    select e.shard, e.user_id, e.state from directory.emails e where e.email = pg_catalog.lower(p_email)
$$;

-- At most `p_limit` (1 to 1000) of shard `p_shard`'s claims pending for more than
-- `p_older_than_seconds`, oldest first, with the time each was claimed: what that shard's
-- gateways settle against their own database (directory.settle_claim).
create or replace function directory.stale_claims(p_shard integer, p_older_than_seconds integer, p_limit integer)
returns table (email text, user_id uuid, claimed_at timestamptz)
language sql stable security definer set search_path = ''
as $$
    select e.email, e.user_id, e.claimed_at
    from directory.emails e
    where e.state = 'pending' and e.shard = p_shard
        and e.claimed_at < pg_catalog.now() - pg_catalog.make_interval(secs => greatest(p_older_than_seconds, 0))
    order by e.claimed_at
    limit greatest(least(p_limit, 1000), 1)
$$;

-- Settles one stale pending claim of (p_shard, p_user) as its shard found it:
-- `p_linked` (the shard's user has the email as its own) marks it linked; else it is
-- deleted, but only if it is still the claim seen (`p_claimed_at` unchanged: a link
-- retried since renewed it, and its own request settles it). 'linked', 'released' or
-- 'unchanged'.
create or replace function directory.settle_claim(
    p_email text, p_shard integer, p_user uuid, p_claimed_at timestamptz, p_linked boolean
) returns text
language plpgsql security definer set search_path = ''
as $$
begin
    if p_linked then
        update directory.emails e set state = 'linked', linked_at = pg_catalog.now()
        where e.email = pg_catalog.lower(p_email) and e.shard = p_shard and e.user_id = p_user
            and e.state = 'pending';
        return case when found then 'linked' else 'unchanged' end;
    end if;
    delete from directory.emails e
    where e.email = pg_catalog.lower(p_email) and e.shard = p_shard and e.user_id = p_user
        and e.state = 'pending' and e.claimed_at = p_claimed_at;
    return case when found then 'released' else 'unchanged' end;
end
$$;

revoke all on function directory.claim(text, integer, uuid), directory.mark_linked(text, integer, uuid),
    directory.unlink(text, integer, uuid), directory.release(text, integer, uuid), directory.lookup(text),
    directory.stale_claims(integer, integer, integer),
    directory.settle_claim(text, integer, uuid, timestamptz, boolean) from public;
grant execute on function directory.claim(text, integer, uuid), directory.mark_linked(text, integer, uuid),
    directory.unlink(text, integer, uuid), directory.release(text, integer, uuid), directory.lookup(text),
    directory.stale_claims(integer, integer, integer),
    directory.settle_claim(text, integer, uuid, timestamptz, boolean) to ferry_directory;
