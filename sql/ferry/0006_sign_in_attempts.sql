-- Sign-in attempts (docs/ARCHITECTURE.md "Sign-in attempts"): every password check of
-- POST /v1/auth/signin is reserved here before it is hashed, so that the limits on failed
-- sign-ins (per email, per client address) and on successful ones (per account) hold in
-- any burst, across a gateway restart and across every gateway on the database. The
-- functions are in functions/sign_in_attempts.sql.
--
--   email        the email signed in with, normalised (trimmed, lowercased), whether or
--                not an account has it
--   address      the client's rate-limit key (its address without the port)
--   reserved_at  when the check was reserved (clock_timestamp, after the key locks)
--   outcome      null while the password is being checked (it counts as a failure and
--                as a sign-in until settled), 'failed' or 'signed_in'

create table ferry.sign_in_attempts (
    id bigint generated always as identity primary key,
    email text not null,
    address text not null,
    reserved_at timestamptz not null,
    outcome text check (outcome in ('failed', 'signed_in'))
);

create index sign_in_attempts_email on ferry.sign_in_attempts (email, reserved_at);
create index sign_in_attempts_address on ferry.sign_in_attempts (address, reserved_at);
-- For the trim of attempts older than the window, oldest first.
create index sign_in_attempts_reserved_at on ferry.sign_in_attempts (reserved_at);

comment on table ferry.sign_in_attempts is
    'Password checks of sign-ins, reserved before hashing, for the sign-in limits (docs/ARCHITECTURE.md, "Sign-in attempts"); written and read only through functions/sign_in_attempts.sql.';

revoke all on ferry.sign_in_attempts from public;
