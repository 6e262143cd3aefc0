-- multi: what the multi-lock scripts share. The locks are the same objects
-- as /locks/{name} (plain locks: joined after lock_plain.lua and lock.lua,
-- whose functions do the work on each lock), so a multi-lock conflicts
-- with single locks on any of its names, and a release wakes the single
-- locks' waiters too. Every script runs on one Redis node with all its
-- names' keys (standalone, Sentinel): all or nothing, atomically.
--
-- KEYS[3i-2], KEYS[3i-1], KEYS[3i]  lock i's hash, fence and this
--          attempt's marker (the hash again where the script has no attempt)
-- ARGV[1]  holder id
-- ARGV[2]  lease in milliseconds ('' where none; an acquire in a session:
--          the session's end, ms on Redis's clock, see acquire in lock.lua)
-- ARGV[3]  attempt id ('' where none)
-- ARGV[4]  marker lifetime in milliseconds ('' where none)
-- ARGV[5]  the session the holds are taken in ('' for none, or where the
--          script takes none)
-- ARGV[6]  the version of the session's state the lease comes from ('')
-- ARGV[7]  the holds' owner label ('' for none, or where the script takes
--          none; see holds.lua)
-- ARGV[7+i]  lock i's wake channel

local COUNT = #KEYS / 3

local function hash_of(i)
  return KEYS[3 * i - 2]
end

local function channel_of(i)
  return ARGV[7 + i]
end

-- {0, i, j, ...}: the locks (by index) the holder does not hold, or nil
-- when it holds them all.
local function missing(holder)
  local reply = {0}
  for i = 1, COUNT do
    if redis.call('HGET', hash_of(i), 'holder') ~= holder then
      reply[#reply + 1] = i
    end
  end
  if #reply > 1 then
    return reply
  end
  return nil
end
