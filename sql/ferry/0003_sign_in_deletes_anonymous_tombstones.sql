-- 0003_sign_in_deletes_anonymous_tombstones: ferry.sign_in deletes every row of the
-- anonymous user it deletes.
--
-- Changes
--   ferry.sign_in   an anonymous user with no live rows (only tombstones) was deleted
--                   "silently" but its tombstones stayed in the synced tables, owned by a
--                   user that no longer exists, where no cleanup or account deletion would
--                   ever reach them. Now its remaining rows are deleted with it, in the same
--                   transaction. (keep_cloud has already deleted them and keep_device moved
--                   them, so for those the extra call finds nothing.)
--
-- create or replace keeps the function's owner and grants (ferry_gateway only).

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
        perform ferry.announce_revocation(s.id, p_anonymous, 'account_deleted')
            from ferry.sessions s where s.user_id = p_anonymous and s.revoked_at is null;
        -- What is left of the anonymous user's rows (its tombstones, when it had no live row
        -- and so no choice to make) goes with it: nothing else would ever delete them.
        perform ferry.delete_user_rows(p_anonymous);
        delete from ferry.users u where u.id = p_anonymous;
    end if;
    session_id := ferry.open_session(p_user, p_device, p_refresh_hash);
    update ferry.users u set last_seen_at = now() where u.id = p_user returning u.email into email;
    status := 'ok';
end
$$;
