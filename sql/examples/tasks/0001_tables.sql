-- 0001_tables: the to-do list's tables, each registered with its sync strategy.
--
-- Copy and adapt: an operator's migration like any other (applied once, never edited).
-- Both tables are keyed within their owner user_id, so each user has every key to
-- themselves (docs/TABLES.md, "Keys"); push fills user_id in from the caller. No
-- foreign key to ferry.users: Ferry's account functions move, tombstone and delete a
-- user's rows in every registered table themselves (first sign-in, account deletion).
--
--   tasks          lww       a tree by parent_id, which names a task of the same user.
--                            Top-level tasks have parent_id 'root', a sentinel that is no
--                            task's id (the check below keeps it so), rather than null: a
--                            client keys its local tree by parent without a special case,
--                            and a sort by (parent_id, position) needs no NULLS handling.
--                            The column stays nullable (a client that sends null gets a
--                            top-level task: read null as 'root'). Deletes are soft: push
--                            sets the tombstone (_deleted) and pull sends the key, so a
--                            phone's delete reaches the laptop like any edit. Deleting a
--                            parent does not delete its children here: the client
--                            tombstones the subtree. No foreign key on parent_id: a child
--                            may arrive (offline create order) before its parent.
--   subscriptions  readonly  plan and status per user, written only by the operator's
--                            billing hook (as the table owner, with SQL); clients read their own.

create table public.tasks (
    id text not null check (id <> 'root'),
    user_id uuid not null,
    parent_id text default 'root',
    title text not null default '',
    position double precision not null default 0,
    -- {"due_at": "…", "completed_at": "…", …}: times as ISO 8601 strings, set by the app.
    metadata jsonb not null default '{}' check (pg_catalog.jsonb_typeof(metadata) = 'object'),
    primary key (user_id, id)
);
select ferry.register_table('public.tasks', strategy => 'lww');

create table public.subscriptions (
    user_id uuid primary key,
    plan text not null default 'free',
    status text not null default 'active' check (status in ('active', 'trialing', 'past_due', 'canceled')),
    renews_at timestamptz
);
select ferry.register_table('public.subscriptions', strategy => 'readonly');
