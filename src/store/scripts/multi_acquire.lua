-- multi_acquire: take (or re-enter) every lock of the set, or none.
-- Runs after lock_plain.lua, lock.lua and multi.lua (keys and arguments
-- there).
--
-- Returns  {1, token_1, hold_count_1, token_2, hold_count_2, ...}  granted,
--                   in the order of the keys (a repeat of the attempt
--                   returns its grant again)
--          {0, retry_after_ms, {owner, ...}, i, j, ...}  held by others:
--                   the locks that block (by index), the owner labels of
--                   their holds ('' for none; at most 10), and the longest
--                   remaining lease among them (-1 when one has no TTL:
--                   someone removed it by hand)
--          {-1}     this attempt was already given up: nothing granted
--          {-5}     the holder holds a lock of the set in another session,
--                   or in none (or the reverse): session-mismatch, nothing
--                   taken
--
-- Nothing is taken unless everything can be: no other client ever sees a
-- part of the set held by this request.
local holder, lease, id, session, version = ARGV[1], ARGV[2], ARGV[3], ARGV[5], ARGV[6]
local owner = ARGV[7]
local blocked, owners, longest = {0, 0}, {}, 0
for i = 1, COUNT do
  if redis.call('EXISTS', KEYS[3 * i]) == 1 then
    return {-1}
  end
  local h = redis.call('HMGET', hash_of(i), 'holder', 's', 'o')
  if h[1] == holder and (h[2] or '') ~= session then
    return {-5}
  end
  local held_by = h[3] or ''
  h = h[1]
  if h and h ~= holder then
    blocked[#blocked + 1] = i
    if #owners < 10 then
      owners[#owners + 1] = held_by
    end
    local pttl = redis.call('PTTL', hash_of(i))
    if pttl < 0 then
      longest = -1
    elseif longest >= 0 and pttl > longest then
      longest = pttl
    end
  end
end
if #blocked > 2 then
  blocked[2] = longest
  table.insert(blocked, 3, owners)
  return blocked
end
local reply = {1}
for i = 1, COUNT do
  local granted = acquire(hash_of(i), KEYS[3 * i - 1], KEYS[3 * i], holder, lease, id,
    channel_of(i), session, version, owner)
  reply[#reply + 1] = granted[2]
  reply[#reply + 1] = granted[3]
end
return reply
