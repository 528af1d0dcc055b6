-- WatermelonDB's sync timestamps (docs/WATERMELONDB.md, "The timestamp"): each number
-- a pull of GET /v1/watermelon/sync answers names the snapshot that pull read, stored
-- here for the device it was issued to. The functions are in functions/watermelon.sql.
--
-- Why a stored snapshot: a pull must send every row whose change stamp (_stamp) is not
-- visible in the previous pull's snapshot, and a push must refuse a record changed
-- since then; a PostgreSQL snapshot is (xmin, xmax, in-progress xids), not a number, and
-- no number WatermelonDB can hold (a positive integer, exact in a double) encodes one.
-- So the number is a key: n comes from a sequence, strictly increasing in real time
-- across sessions (cache 1), at most 2^53 - 1 (exact in JavaScript), never reused; a
-- pull reads its rows in one snapshot S, stores (user, device, n, S) in its own
-- transaction and answers n. A pull presenting n reads S(n) back; an n this device was
-- never issued, or one trimmed by the tombstone purge, is 409 cursor_expired.

create sequence ferry.watermelon_cursor_seq as bigint
    minvalue 1 maxvalue 9007199254740991 cache 1 no cycle;

create table ferry.watermelon_cursors (
    user_id uuid not null references ferry.users on delete cascade,
    device_id text not null,
    -- The timestamp WatermelonDB stores (lastPulledAt).
    n bigint not null,
    -- The snapshot that pull read its rows in.
    snapshot pg_snapshot not null,
    issued_at timestamptz not null default now(),
    primary key (user_id, device_id, n)
);

comment on table ferry.watermelon_cursors is
    'The snapshot each WatermelonDB timestamp names, per user and device (docs/WATERMELONDB.md, "The timestamp"); written and read only through functions/watermelon.sql.';

-- Requests reach both through SECURITY DEFINER functions that act on the caller's own
-- user and device alone.
revoke all on ferry.watermelon_cursors from public;
revoke all on sequence ferry.watermelon_cursor_seq from public;
