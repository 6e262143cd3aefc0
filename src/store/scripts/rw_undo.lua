-- rw_undo: give back exactly what one acquire attempt granted, if anything
-- (its client is gone, or was told the attempt failed).
-- Runs after queue.lua and rw.lua (keys and common arguments there).
--
-- ARGV[3]  what is left of the queue grace for the waiter's place
--          (restore_place in queue.lua)
-- ARGV[4]  the wait of the attempt's long-poll, as its tries send it, while
--          it keeps a place ('' otherwise): a waiter whose grant is given
--          back keeps its place (restore_place in queue.lua)
-- ARGV[5]  attempt id
-- ARGV[6]  lifetime of the marker (KEYS[3]) in milliseconds
--
-- Returns  1  the attempt's hold was given back (the queue was woken if
--             the holder's hold in that mode ended)
--          0  the attempt holds nothing; a marker now makes sure that,
--             should the attempt still reach Redis, it grants nothing
--
-- Never touches another attempt's hold, even of the same holder: the
-- holds above the attempt's level each move one level down.
refresh()
local holder, id = ARGV[2], ARGV[5]
local made = redis.call('HGET', KEYS[1], 'a|' .. id)
if not made then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[6])
  return 0
end
local mode, level = string.sub(made, 1, 1), tonumber(string.sub(made, 2))
if redis.call('HGET', KEYS[1], index_key(mode, holder, level)) ~= id then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[6])
  return 0
end
local count_field = (mode == 'w') and 'wc' or ('r|' .. holder)
local count = tonumber(redis.call('HGET', KEYS[1], count_field))
for l = level + 1, count do
  local above = redis.call('HGET', KEYS[1], index_key(mode, holder, l))
  redis.call('HSET', KEYS[1], index_key(mode, holder, l - 1), above, 'a|' .. above, mode .. (l - 1))
end
redis.call('HDEL', KEYS[1], index_key(mode, holder, count), 'a|' .. id)
if count > 1 then
  redis.call('HSET', KEYS[1], count_field, count - 1)
  return 1
end
-- A waiter keeps its place while its long-poll does (queue.lua).
restore_place(mode .. '|' .. holder)
hold_ended(mode, holder)
return 1
