-- sem_undo: give back exactly the permits one acquire attempt was granted,
-- if any (its client is gone, or was told the attempt failed) — never the
-- holder's other permits.
-- Runs after queue.lua and sem.lua (keys and common arguments there).
--
-- ARGV[3]  what is left of the queue grace for the waiter's place
--          (restore_place in queue.lua)
-- ARGV[4]  the wait of the attempt's long-poll, as its tries send it, while
--          it keeps a place ('' otherwise): a waiter whose grant is given
--          back keeps its place (restore_place in queue.lua)
-- ARGV[5]  attempt id
-- ARGV[6]  lifetime of the marker (KEYS[3]) in milliseconds
--
-- Returns  1  the attempt's permits were given back (and the queue woken)
--          0  the attempt holds nothing; a marker now makes sure that,
--             should the attempt still reach Redis, it grants nothing
refresh()
local holder, id = ARGV[2], ARGV[5]
local given = redis.call('HGET', KEYS[7], 'a|' .. id)
if not given then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[6])
  return 0
end
given = tonumber(given)
local permits = tonumber(redis.call('HGET', KEYS[7], 'p|' .. holder) or '0')
if permits <= given then
  drop_holder(holder)
else
  local others = {}
  for other in string.gmatch(redis.call('HGET', KEYS[7], 'as|' .. holder) or '', '%S+') do
    if other ~= id then
      others[#others + 1] = other
    end
  end
  redis.call('HINCRBY', KEYS[7], 'p|' .. holder, -given)
  redis.call('HINCRBY', KEYS[7], 'used', -given)
  redis.call('HINCRBY', KEYS[7], 'c|' .. holder, -1)
  redis.call('HSET', KEYS[7], 'as|' .. holder, table.concat(others, ' '))
  redis.call('HDEL', KEYS[7], 'a|' .. id)
end
-- A waiter keeps its place while its long-poll does (queue.lua).
restore_place(given .. '|' .. holder)
expire_holds()
wake()
return 1
