-- latch_state: read a latch's count and remaining life in one snapshot.
--
-- KEYS[1]  latch  {prefix}{name}:latch  (string: the count)
--
-- Returns  {0}               open (no such latch: never set, opened,
--                            expired or deleted)
--          {count, life_ms}  closed; life_ms is -1 if the key has no TTL
--                            (someone removed it by hand)
--
-- Read-only.
local count = redis.call('GET', KEYS[1])
if not count then
  return {0}
end
return {tonumber(count), redis.call('PTTL', KEYS[1])}
