-- 0003_game_records_keyed_within_owner: a finished game's id is unique per player, not
-- across all players.
--
-- game_records was keyed by id alone, and ids are made on the device (the app uses
-- 'g-<unix time>'): two players finishing a game in the same second made the same id,
-- and the second one's push was refused for good, telling them that somebody had that
-- id. Keyed (user_id, id), each player has every id to themselves. Clients change
-- nothing: push fills user_id in from the caller; pull's deletes now carry user_id too.
-- Every other per-user table here was keyed within its owner already.
--
-- Registering again rebuilds what register_table made from the old key (the pull reader).

alter table public.game_records drop constraint game_records_pkey, add primary key (user_id, id);
select ferry.register_table('public.game_records', strategy => 'insert_only');
