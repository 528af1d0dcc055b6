-- The sign-in limits (docs/PROTOCOL.md "Rate limits"; docs/ARCHITECTURE.md "Sign-in
-- attempts"): a sign-in's password check is reserved in ferry.sign_in_attempts before
-- the gateway hashes it, and settled with its outcome after. Counting before the hash is
-- what makes a burst safe: 80 concurrent wrong passwords for one email reserve at most
-- the limit, and only those are checked. Both functions are SECURITY DEFINER and granted
-- to ferry_gateway.

-- Reserves one password check for p_email from p_address, or says which limit refuses
-- it. Within the last p_window: the attempts of the email that are not sign-ins (failed,
-- or still being checked) must be fewer than p_failed_limit, those of the address too,
-- and the attempts of the email that are not failures (sign-ins, or still being checked)
-- fewer than p_sign_in_limit. An attempt still being checked counts against both kinds,
-- so that no burst gets past either.
--   attempt_id           the reservation (null when refused), for ferry.settle_sign_in
--   refused              null, or the limit that refuses: 'email', 'address', 'account'
--   retry_after_seconds  refused: whole seconds until its oldest counted attempt leaves
--                        the window (at least 1)
-- The email's and the address's transaction-level advisory locks serialise reservations
-- of one key across every gateway (the email's first, so two reservations never wait on
-- each other in a cycle). Each call also deletes the expired attempts of its email and
-- address, and at most 16 other expired ones, so the table holds about one window.
create or replace function ferry.reserve_sign_in(
    p_email text, p_address text, p_failed_limit integer, p_sign_in_limit integer, p_window interval,
    out attempt_id bigint, out refused text, out retry_after_seconds integer
)
language plpgsql security definer set search_path = ''
as $$
declare
    v_now timestamptz;
    v_since timestamptz;
    v_count bigint;
    v_oldest timestamptz;
begin
    if p_email is null or p_address is null or p_failed_limit is null or p_failed_limit < 1
        or p_sign_in_limit is null or p_sign_in_limit < 1 or p_window is null or p_window <= interval '0'
    then
        raise exception 'reserve_sign_in: an email, an address, positive limits and a positive window'
            using errcode = '22023';
    end if;
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('ferry.sign_in email ' || p_email, 0));
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('ferry.sign_in address ' || p_address, 0));
    v_now := pg_catalog.clock_timestamp();
    v_since := v_now - p_window;

    delete from ferry.sign_in_attempts a
    where (a.email = p_email or a.address = p_address) and a.reserved_at <= v_since;
    delete from ferry.sign_in_attempts a where a.id = any (array(
        select x.id from ferry.sign_in_attempts x
        where x.reserved_at <= v_since order by x.reserved_at limit 16
        for update skip locked));

    select pg_catalog.count(*), pg_catalog.min(a.reserved_at) into v_count, v_oldest
    from ferry.sign_in_attempts a
    where a.email = p_email and a.reserved_at > v_since and a.outcome is distinct from 'signed_in';
    if v_count >= p_failed_limit then
        refused := 'email';
    else
        select pg_catalog.count(*), pg_catalog.min(a.reserved_at) into v_count, v_oldest
        from ferry.sign_in_attempts a
        where a.address = p_address and a.reserved_at > v_since and a.outcome is distinct from 'signed_in';
        if v_count >= p_failed_limit then
            refused := 'address';
        else
            select pg_catalog.count(*), pg_catalog.min(a.reserved_at) into v_count, v_oldest
            from ferry.sign_in_attempts a
            where a.email = p_email and a.reserved_at > v_since and a.outcome is distinct from 'failed';
            if v_count >= p_sign_in_limit then
                refused := 'account';
            end if;
        end if;
    end if;

    if refused is not null then
        retry_after_seconds := greatest(1, pg_catalog.ceil(
            extract(epoch from v_oldest + p_window - v_now))::integer);
        return;
    end if;
    insert into ferry.sign_in_attempts (email, address, reserved_at)
    values (p_email, p_address, v_now)
    returning id into attempt_id;
end
$$;

-- Settles a reservation with its outcome: 'failed' (a wrong password, or no such
-- account), 'signed_in' (a session was opened), or null when the attempt counts for
-- nothing (the hasher was busy, the sign-in needs a resolution, the database failed):
-- then the reservation is deleted. An attempt never settled (its gateway died) keeps
-- counting as both until it leaves the window.
create or replace function ferry.settle_sign_in(p_attempt bigint, p_outcome text) returns void
language plpgsql security definer set search_path = ''
as $$
begin
    if p_outcome is null then
        delete from ferry.sign_in_attempts a where a.id = p_attempt;
    elsif p_outcome in ('failed', 'signed_in') then
        update ferry.sign_in_attempts a set outcome = p_outcome where a.id = p_attempt;
    else
        raise exception 'settle_sign_in: the outcome is failed, signed_in or null' using errcode = '22023';
    end if;
end
$$;

revoke all on function
    ferry.reserve_sign_in(text, text, integer, integer, interval), ferry.settle_sign_in(bigint, text)
from public;

grant execute on function
    ferry.reserve_sign_in(text, text, integer, integer, interval), ferry.settle_sign_in(bigint, text)
to ferry_gateway;
