-- Refresh tokens rotate with a grace window, and a session keeps two of them at most
-- (docs/PROTOCOL.md "Accounts", refresh; functions/accounts.sql, ferry.refresh_session):
-- its current token and the one it rotated last, which holds its successor sealed
-- (sealed_successor) so that the same token presented again within the window is
-- answered with the same successor. Tokens rotated before that leave the table; the
-- session keeps the hash of its chain (what every token of the session names), so one of
-- them presented again is still recognised, and revokes the session.
alter table ferry.sessions add column refresh_chain text;
create unique index sessions_refresh_chain on ferry.sessions (refresh_chain) where refresh_chain is not null;
alter table ferry.refresh_tokens add column sealed_successor text;

-- Every token rotated before this migration is gone: such a token presented again is now
-- answered 401 unauthorized (as an unknown token) instead of revoking its session; the
-- tokens in use rotate as before.
delete from ferry.refresh_tokens where used_at is not null;

-- ferry.refresh_session takes the chain, the sealed successor and the window now.
drop function if exists ferry.refresh_session(text, text);
