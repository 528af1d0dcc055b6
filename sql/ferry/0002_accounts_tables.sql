-- Accounts (docs/PROTOCOL.md "Accounts"): users, their sessions and refresh tokens, and
-- recent revocations. No role but their owner may read or write them: the gateway
-- reaches them through the functions of functions/accounts.sql.

-- An account; anonymous while it has no email.
create table ferry.users (
    id uuid primary key default gen_random_uuid(),
    -- Lowercased by the gateway; unique case-insensitively below.
    email text,
    password_hash text,
    created_at timestamptz not null default now(),
    last_seen_at timestamptz not null default now(),
    constraint email_and_password_together check ((email is null) = (password_hash is null))
);
create unique index users_email_key on ferry.users (lower(email));
-- cleanup-anonymous scans anonymous users by inactivity.
create index users_anonymous_last_seen on ferry.users (last_seen_at) where email is null;

-- One per sign-in on a device; revoked on sign-out, token reuse or account deletion.
create table ferry.sessions (
    id uuid primary key default gen_random_uuid(),
    user_id uuid not null references ferry.users on delete cascade,
    device_id text not null,
    created_at timestamptz not null default now(),
    last_seen_at timestamptz not null default now(),
    revoked_at timestamptz
);
create index sessions_user on ferry.sessions (user_id);

-- The SHA-256 of every refresh token issued, and when it was used: a used one presented
-- again revokes its session.
create table ferry.refresh_tokens (
    token_hash text primary key,
    session_id uuid not null references ferry.sessions on delete cascade,
    created_at timestamptz not null default now(),
    used_at timestamptz
);
create index refresh_tokens_session on ferry.refresh_tokens (session_id);

-- Sessions revoked recently, so that a gateway whose LISTEN connection was down can
-- reload what it missed.
create table ferry.revocations (
    session_id uuid primary key,
    user_id uuid not null,
    reason text not null check (reason in ('signed_out', 'token_reused', 'account_deleted')),
    revoked_at timestamptz not null default now()
);
create index revocations_time on ferry.revocations (revoked_at);

revoke all on ferry.users, ferry.sessions, ferry.refresh_tokens, ferry.revocations from public;
