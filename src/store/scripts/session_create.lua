-- session_create: a new session (after session.lua; keys there).
--
-- ARGV[1]  ttl in ms
--
-- Returns  1 when created, 0 when a session of that id exists (ids carry
--          128 random bits: the caller draws another)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'ttl', ARGV[1], 'v', 0)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
