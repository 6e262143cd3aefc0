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
local holder, mode = ARGV[2], ARGV[5]
-- What the release reads of the hash, in one HMGET (soonest: the
-- readers' reclaim floor, leases.lua).
local function read_hold()
  return redis.call('HMGET', KEYS[1], 'wd', 'w', 'wc', 'r|' .. holder, 'ss|' .. holder, 'soonest')
end
local h = read_hold()
if refresh(h[1], h[6]) then
  h = read_hold()
end
if ARGV[7] and (h[5] or '') ~= ARGV[7] then
  return {-1}
end
local writer = h[2]
if mode == '' then
  mode = (writer == holder) and 'w' or 'r'
end
local count_field = (mode == 'w') and 'wc' or ('r|' .. holder)
if mode == 'w' and writer ~= holder then
  return {-1}
end
local count = h[4]
if mode == 'w' then
  count = h[3]
end
count = (count or 0) + 0
if count == 0 then
  return {-1}
end
local left = count - 1
if ARGV[6] == '1' then
  left = 0
end
-- Its last hold of that mode: does anything else stay held? Not when it
-- is the only reader (the readers count its read hold) and nobody
-- writes, or the writer and no reader, itself included.
local alone = false
if left == 0 and ((mode == 'r' and not writer) or (mode == 'w' and (h[4] or 0) + 0 == 0)) then
  alone = redis.call('ZCARD', KEYS[7]) == ((mode == 'r') and 1 or 0)
end
if alone then
  -- Nothing stays held: the hash and the readers go whole, the hold's
  -- attempts and session with them.
  redis.call('DEL', KEYS[1], KEYS[7])
  wake()
  return {1, 0, mode}
end
local forgotten = attempt_fields(mode, holder, left + 1, count)
if left > 0 then
  on_fields('HDEL', forgotten)
  redis.call('HSET', KEYS[1], count_field, left)
  return {0, left, mode}
end
-- The last hold of that mode, while another stays: its attempts go with
-- it (in its HDEL).
hold_ended(mode, holder, forgotten, writer, true)
return {0, 0, mode}
