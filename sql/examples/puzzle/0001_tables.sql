-- 0001_tables: the puzzle game's tables, each registered with its sync strategy.
--
-- Copy and adapt: this is an operator's migration like any other (applied once, never
-- edited; later changes go in 0002_… onwards). Every owned table has user_id uuid, which
-- ferry.register_table makes the owner column, and is keyed within it, so that each
-- player has every key to themselves (docs/TABLES.md, "Keys"); push fills user_id in
-- from the caller. The sync columns (_stamp, _deleted, updated_at, and _lock_* for
-- device_lock) are added by register_table, not here. No foreign key to ferry.users:
-- Ferry's account functions move, tombstone and delete a user's rows in every
-- registered table themselves (first sign-in, account deletion).
--
--   profiles          lww          username and trophy slots, one row per user
--   user_settings     lww          one JSONB blob per user (push merges whole columns,
--                                  so the client sends the whole blob)
--   game_records      insert_only  a finished game never changes; id is made on the
--                                  device ('g-<unix time>'), unique per player
--   achievements      set          membership: earned once, pushing it again is a no-op
--   active_game       device_lock  the mid-puzzle state, played on one device at a time;
--                                  keyed (user_id, slot), the app uses slot 'current'
--   daily_challenges  lww          per user and day
--   daily_puzzles     shared       the published puzzle of each day, written by the operator

create table public.profiles (
    user_id uuid primary key,
    username text check (pg_catalog.length(username) between 1 and 40),
    -- Trophy slots shown on the profile, in order; null entries are empty slots.
    trophies text[] not null default '{}'
);
select ferry.register_table('public.profiles', strategy => 'lww');

create table public.user_settings (
    user_id uuid primary key,
    settings jsonb not null default '{}'
);
select ferry.register_table('public.user_settings', strategy => 'lww');

create table public.game_records (
    id text not null,
    user_id uuid not null,
    puzzle_id text not null,
    seconds integer not null check (seconds >= 0),
    finished_at timestamptz not null,
    primary key (user_id, id)
);
select ferry.register_table('public.game_records', strategy => 'insert_only');

create table public.achievements (
    user_id uuid not null,
    achievement_id text not null,
    primary key (user_id, achievement_id)
);
select ferry.register_table('public.achievements', strategy => 'set');

create table public.active_game (
    user_id uuid not null,
    slot text not null,
    puzzle_id text,
    -- 81 cells, '0' for empty; notes per cell; hints used; time played so far.
    digits text check (digits ~ '^[0-9]{81}$'),
    notes jsonb not null default '{}',
    hints integer not null default 0 check (hints >= 0),
    elapsed_seconds integer not null default 0 check (elapsed_seconds >= 0),
    primary key (user_id, slot)
);
-- The stale limit: a holder silent for 30 s loses the game to the next device that claims it.
select ferry.register_table('public.active_game', strategy => 'device_lock', options => '{"stale_seconds": 30}');

create table public.daily_challenges (
    user_id uuid not null,
    day date not null,
    seconds integer check (seconds >= 0),
    completed_at timestamptz,
    primary key (user_id, day)
);
select ferry.register_table('public.daily_challenges', strategy => 'lww');

create table public.daily_puzzles (
    day date primary key,
    grid text not null check (grid ~ '^[0-9]{81}$'),
    difficulty text not null default 'medium'
);
select ferry.register_table('public.daily_puzzles', strategy => 'shared');
