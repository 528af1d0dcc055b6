-- Email confirmation (docs/PROTOCOL.md "Accounts"; FERRY_EMAIL_CONFIRMATION): a linked
-- email is unconfirmed until its owner sends the code mailed to it. An unconfirmed email
-- does not count as in use, so several accounts may hold it at once; whoever confirms it
-- first owns it. Only confirmed emails are unique.
alter table ferry.users add column email_confirmed boolean not null default false;
-- Every email linked before confirmation existed is its account's.
update ferry.users set email_confirmed = true where email is not null;
drop index ferry.users_email_key;
create unique index users_confirmed_email_key on ferry.users (lower(email)) where email_confirmed;
create index users_email on ferry.users (lower(email)) where email is not null;

-- These functions answer email_confirmed now, or take what link needs to mail a code.
drop function if exists ferry.find_credentials(text);
drop function if exists ferry.current_account();
drop function if exists ferry.link_email(text, text);
drop function if exists ferry.refresh_session(text, text, text, text, interval);
drop function if exists ferry.change_password(text, text, text);
