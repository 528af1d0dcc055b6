-- 0009_move_user_rows_replaces_rows_keyed_by_owner: keep_device works for tables whose
-- primary key is the owner column alone (one row per user, e.g. the puzzle example's
-- profiles and user_settings).
--
-- Changes
--   ferry.move_user_rows   the cloud row under the same key as a moving row is replaced by
--                          it. The key match was built from the primary key's columns other
--                          than the owner; with none it was null and no cloud row was
--                          deleted, so moving the device's row onto the cloud account broke
--                          the primary key and the whole sign-in failed (500). With the
--                          owner as the only key column, the two users' rows share the key
--                          whenever both exist.
--
-- Numbered 0009: 0008 is taken by the tombstone-purge work on another branch.
-- create or replace keeps the function's owner and grants.

create or replace function ferry.move_user_rows(p_from uuid, p_to uuid) returns void
language plpgsql security definer set search_path = ''
as $$
declare
    t record;
    key_match text;
begin
    for t in select table_name, owner_column from ferry.synced_tables where owner_column is not null loop
        if exists (
            select from pg_catalog.pg_index i
            join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = any (i.indkey)
            where i.indrelid = t.table_name and i.indisprimary and a.attname = t.owner_column
        ) then
            -- The owner is part of the key: the other key columns (none: every pair matches).
            select coalesce(pg_catalog.string_agg(pg_catalog.format('c.%1$I = a.%1$I', a.attname), ' and '), 'true')
                into key_match
                from pg_catalog.pg_index i
                join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = any (i.indkey)
                where i.indrelid = t.table_name and i.indisprimary and a.attname <> t.owner_column;
            execute pg_catalog.format(
                'delete from %1$s c using %1$s a where c.%2$I = $1 and a.%2$I = $2 and %3$s',
                t.table_name, t.owner_column, key_match) using p_to, p_from;
        end if;
        execute pg_catalog.format('update %s set _deleted = true where %I = $1 and not _deleted', t.table_name, t.owner_column)
            using p_to;
        execute pg_catalog.format('update %s set %2$I = $2 where %2$I = $1', t.table_name, t.owner_column)
            using p_from, p_to;
    end loop;
end
$$;
