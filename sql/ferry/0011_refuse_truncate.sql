-- 0011_refuse_truncate: TRUNCATE of a synced table is refused.
--
-- TRUNCATE removes rows without a trace: no tombstone for pulls to bring, no row trigger,
-- no cue. Devices would keep the rows forever, and the next push of one of them would
-- bring it back. DELETE does what an operator means: the rows become tombstones that
-- every device pulls (and ferry.purge_tombstones removes them after the retention).
--
-- Adds
--   ferry.refuse_truncate()  a BEFORE TRUNCATE statement trigger function that raises
--                            0A000 (feature_not_supported), naming the table and saying
--                            what to do instead. An operator who really wants a table
--                            emptied behind the devices' backs (a development database,
--                            say) turns the guard off around it, in one transaction:
--                                begin;
--                                alter table t disable trigger ferry_refuse_truncate;
--                                truncate t;
--                                alter table t enable trigger ferry_refuse_truncate;
--                                commit;
-- Changes
--   ferry.install_cue_triggers(table)
--                            also installs the trigger ferry_refuse_truncate. 0010's
--                            function is kept as ferry.install_cue_triggers_0010 and called
--                            first. ferry.register_table calls this one by name, so new
--                            tables get the guard with no other change; every table
--                            registered before this migration gets it here.

create function ferry.refuse_truncate() returns trigger
language plpgsql set search_path = ''
as $$
begin
    raise exception 'TRUNCATE of synced table %.% is refused: it leaves no tombstones, so devices would keep the rows',
        tg_table_schema, tg_table_name
        using errcode = '0A000',
            hint = 'DELETE the rows instead: they become tombstones that devices pull. To empty the table anyway,'
                ' disable the trigger ferry_refuse_truncate around the TRUNCATE in one transaction.';
end
$$;

comment on function ferry.refuse_truncate() is
    'BEFORE TRUNCATE trigger of every synced table: refuses it (0A000), since TRUNCATE leaves no tombstones for devices to pull';

alter function ferry.install_cue_triggers(regclass) rename to install_cue_triggers_0010;

create function ferry.install_cue_triggers(p_table regclass) returns void
language plpgsql set search_path = ''
as $$
begin
    perform ferry.install_cue_triggers_0010(p_table);
    execute pg_catalog.format(
        'create or replace trigger ferry_refuse_truncate before truncate on %s'
            ' for each statement execute function ferry.refuse_truncate()',
        p_table);
end
$$;

comment on function ferry.install_cue_triggers(regclass) is
    'Installs the triggers that keep devices told of a synced table''s changes: ferry_cue_insert, ferry_cue_update, ferry_cue_delete (ferry.send_cues) and ferry_refuse_truncate. Called by ferry.register_table.';

select ferry.install_cue_triggers(s.table_name) from ferry.synced_tables s;

-- The renamed 0010 function keeps 0010's revoke.
revoke all on function ferry.refuse_truncate(), ferry.install_cue_triggers(regclass) from public;
