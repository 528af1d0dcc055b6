-- 0001_drill_writes: the table deploy/failover-drill.sh's writers push to, and a count
-- of every time a push wrote one of its rows, so the drill can tell an acknowledged push
-- that was lost (no application) from one applied twice (two).
--
-- drill_writes is lww: a push that ran again would upsert its row again, which fires
-- the trigger again (an insert_only row pushed twice is a silent no-op, invisible here).
-- drill_applications is not synced; the trigger runs as its owner, so the request role
-- needs no grant on it.

create table public.drill_writes (
    user_id uuid not null,
    id text not null,
    payload text not null,
    primary key (user_id, id)
);
select ferry.register_table('public.drill_writes', strategy => 'lww');

create table public.drill_applications (
    user_id uuid not null,
    id text not null,
    applied_at timestamptz not null default pg_catalog.clock_timestamp()
);

create function public.drill_count_application() returns trigger
language plpgsql security definer set search_path = ''
as $$
begin
    insert into public.drill_applications (user_id, id) values (new.user_id, new.id);
    return null;
end
$$;

create trigger drill_count_application after insert or update on public.drill_writes
    for each row execute function public.drill_count_application();
