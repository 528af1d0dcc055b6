-- 0014_sign_out_keeps_refresh_tokens: a refresh token of a signed-out session is answered
-- `401 session_revoked`, as PROTOCOL.md's notes say, not `401 unauthorized`.
--
-- Changes
--   ferry.sign_out()   revokes the session and no longer deletes its refresh tokens.
--                      0002's deleted them, so ferry.refresh_session found no token and
--                      answered invalid (unauthorized) instead of revoked. The tokens of a
--                      revoked session can never rotate again (refresh_session checks the
--                      session first), and they go with the session when its user is
--                      deleted (on delete cascade), as every used token already did.
--                      Sessions signed out before this migration have lost theirs: their
--                      tokens stay `unauthorized`.
--
-- create or replace keeps the function's owner and grants (ferry_client).

create or replace function ferry.sign_out() returns void
language plpgsql security definer set search_path = ''
as $$
declare
    revoked uuid;
begin
    update ferry.sessions s set revoked_at = now()
        where s.id = ferry.session_id() and s.user_id = ferry.uid() and s.revoked_at is null
        returning s.id into revoked;
    if revoked is not null then
        perform ferry.announce_revocation(revoked, ferry.uid(), 'signed_out');
    end if;
end
$$;
