-- Cues that push and WatermelonDB push queue in their own transaction instead of
-- sending them at its commit (ferry.queue_cue, functions/cues.sql): the gateway that
-- served the push sends them right after the commit (ferry.send_queued_cues), in one
-- notifying transaction for every push it committed meanwhile, so pushes no longer
-- take PostgreSQL's cluster-wide NOTIFY lock through their commit's WAL flush.
--
-- UNLOGGED: a queued cue costs the push no WAL. PostgreSQL empties the table after a
-- crash and a promoted replica starts with it empty, and in both cases every gateway's
-- listener reconnects and cues every stream (docs/ARCHITECTURE.md, "Cues out of the
-- commit"), so what is lost with it is never needed.
create unlogged table ferry.queued_cues (
    payload text not null
);
revoke all on ferry.queued_cues from public;
grant insert on ferry.queued_cues to ferry_client;

comment on table ferry.queued_cues is
    'Cues a push queued in its transaction (ferry.queue_cue), sent after its commit by ferry.send_queued_cues; unlogged: emptied by a crash, when every stream is cued anyway.';
