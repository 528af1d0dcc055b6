-- What became of a device's mutations, for a retried push (docs/PROTOCOL.md "Push"): a
-- mutation answered `duplicate` carries its original outcome while the server remembers
-- it. Rejections are stored (ferry.rejected_mutations, migration 0010) from the device's
-- outcomes_from on; a mutation at or above it with no stored rejection was applied. The
-- tombstone purge trims old rejections (ferry.trim_rejected_mutations) and raises
-- outcomes_from past them. Push calls the first two as ferry_client; both are SECURITY
-- DEFINER and act on the caller's own device alone.

-- Stores the rejections of one push batch (ids, codes, messages in step), in the push's
-- transaction. Messages are cut to 500 characters.
create or replace function ferry.remember_rejections(p_ids bigint[], p_codes text[], p_messages text[]) returns void
language sql security definer set search_path = ''
as $$
    insert into ferry.rejected_mutations (user_id, device_id, mutation_id, code, message)
    select ferry.uid(), ferry.device_id(), r.id, r.code, pg_catalog.left(coalesce(r.message, ''), 500)
    from rows from (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_codes), pg_catalog.unnest(p_messages)) r(id, code, message)
    on conflict do nothing;
$$;

-- The answer to a mutation of the caller's device whose id is not above its
-- last_mutation_id: {"id", "status": "duplicate"} with "original": "applied", or
-- "original": "rejected" and its "code" and "message"; no original below outcomes_from.
create or replace function ferry.duplicate_result(p_id bigint) returns jsonb
language sql stable security definer set search_path = ''
as $$
    select pg_catalog.jsonb_build_object('id', p_id, 'status', 'duplicate')
        || case
            when r.code is not null then pg_catalog.jsonb_build_object('original', 'rejected', 'code', r.code,
                'message', r.message)
            when p_id >= d.outcomes_from then '{"original": "applied"}'::jsonb
            else '{}'::jsonb end
    from (select) one
    left join ferry.devices d on d.user_id = ferry.uid() and d.device_id = ferry.device_id()
    left join ferry.rejected_mutations r
        on r.user_id = d.user_id and r.device_id = d.device_id and r.mutation_id = p_id;
$$;

-- Deletes at most p_batch rejections older than p_older_than, oldest first, and raises
-- each of their devices' outcomes_from past the newest one deleted: a duplicate below
-- it carries no original. Returns how many. Called by ferry.purge_tombstones.
create or replace function ferry.trim_rejected_mutations(p_older_than interval, p_batch integer) returns bigint
language plpgsql security definer set search_path = ''
as $$
declare
    v_count bigint;
begin
    with gone as (
        delete from ferry.rejected_mutations r where (r.user_id, r.device_id, r.mutation_id) in (
            select x.user_id, x.device_id, x.mutation_id from ferry.rejected_mutations x
            where x.rejected_at < pg_catalog.now() - p_older_than
            order by x.rejected_at
            limit p_batch
            for update skip locked)
        returning r.user_id, r.device_id, r.mutation_id
    ), raised as (
        update ferry.devices d set outcomes_from = greatest(d.outcomes_from, g.through + 1)
        from (select g.user_id, g.device_id, pg_catalog.max(g.mutation_id) as through from gone g
              group by g.user_id, g.device_id) g
        where d.user_id = g.user_id and d.device_id = g.device_id
    )
    select pg_catalog.count(*) into v_count from gone;
    return v_count;
end
$$;

comment on function ferry.remember_rejections(bigint[], text[], text[]) is
    'Stores a push batch''s rejections for the caller''s device, so a retried push''s duplicate carries them (docs/PROTOCOL.md "Push").';
comment on function ferry.duplicate_result(bigint) is
    'A duplicate mutation''s result for the caller''s device: {"id", "status": "duplicate"} with its "original" outcome while it is remembered.';
comment on function ferry.trim_rejected_mutations(interval, integer) is
    'Deletes at most batch rejections older than older_than and raises their devices'' outcomes_from past them; returns the count.';

revoke all on function ferry.remember_rejections(bigint[], text[], text[]), ferry.duplicate_result(bigint),
    ferry.trim_rejected_mutations(interval, integer) from public;
grant execute on function ferry.remember_rejections(bigint[], text[], text[]), ferry.duplicate_result(bigint)
    to ferry_client;
