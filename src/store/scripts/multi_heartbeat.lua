-- multi_heartbeat: renew the holder's lease on every lock of the set, or
-- on none. Runs after lock_plain.lua, lock.lua and multi.lua.
--
-- ARGV[2]  new lease in ms, or '' to renew each lock for the lease it has
--          (a lock held in a session: no further than the session's end;
--          a lock that now ends earlier than it did wakes its waiters)
--
-- Returns  {1, token_1, hold_count_1, lease_1, token_2, ...}  renewed
--                          (lease_i: what lock i has left now)
--          {0, i, j, ...}  the locks (by index) the holder does not hold;
--                          nothing was renewed
local holder = ARGV[1]
local gaps = missing(holder)
if gaps then
  return gaps
end
local reply = {1}
for i = 1, COUNT do
  local renewed = renew(hash_of(i), channel_of(i), holder, ARGV[2])
  reply[#reply + 1] = renewed[2]
  reply[#reply + 1] = renewed[3]
  reply[#reply + 1] = renewed[4]
end
return reply
