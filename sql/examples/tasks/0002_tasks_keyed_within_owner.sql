-- 0002_tasks_keyed_within_owner: a task's id is unique per user, not across all users.
--
-- tasks was keyed by id alone, and ids are made on the device: a user whose id happened
-- to match another user's task had their push refused for good, learning that somebody
-- had that id. Keyed (user_id, id), each user has every id to themselves, and parent_id
-- names a task of the same user. Clients change nothing: push fills user_id in from the
-- caller; pull's deletes now carry user_id too.
--
-- Registering again rebuilds what register_table made from the old key (the pull reader
-- and the static upsert).

alter table public.tasks drop constraint tasks_pkey, add primary key (user_id, id);
select ferry.register_table('public.tasks', strategy => 'lww');
