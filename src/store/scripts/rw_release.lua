-- rw_release: drop one hold (or all holds) of a holder in one mode.
-- Runs after queue.lua and rw.lua (keys and common arguments there).
--
-- ARGV[5]  'r', 'w', or '' for the write hold if the holder has one, else
--          the read hold
-- ARGV[6]  '1' to release every hold of that mode, '0' to release one
-- ARGV[7]  only when a session ends: the session (holds taken in another
--          session, or in none, are not released)
--
-- Returns  {-1}                          the holder has no hold of that mode
--                                        (or none in that session)
--          {released, hold_count, mode}  released is 1 when the rwlock
--                                        became free; hold_count is what the
--                                        holder keeps in that mode
--
-- A hold that ends wakes the queue: a write release lets the readers
-- queued before the next writer go (or that writer), a read release that
-- frees the lock lets the writer at the head go.
refresh()
local holder, mode = ARGV[2], ARGV[5]
if ARGV[7] and session_of(KEYS[1], holder) ~= ARGV[7] then
  return {-1}
end
local writer = redis.call('HGET', KEYS[1], 'w')
if mode == '' then
  mode = (writer == holder) and 'w' or 'r'
end
local count_field = (mode == 'w') and 'wc' or ('r|' .. holder)
if mode == 'w' and writer ~= holder then
  return {-1}
end
local count = tonumber(redis.call('HGET', KEYS[1], count_field) or '0')
if count == 0 then
  return {-1}
end
local left = count - 1
if ARGV[6] == '1' then
  left = 0
end
forget(mode, holder, left + 1, count)
if left > 0 then
  redis.call('HSET', KEYS[1], count_field, left)
  return {0, left, mode}
end
hold_ended(mode, holder)
local free = redis.call('EXISTS', KEYS[1]) == 0
return {free and 1 or 0, 0, mode}
