-- session_create: a new session (after session.lua; keys there).
--
-- ARGV[1]  ttl in ms
-- ARGV[2]  the session's owner label ('' for none)
--
-- Returns  1 when created, 0 when a session of that id exists (ids carry
--          128 random bits: the caller draws another)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'ttl', ARGV[1], 'v', 0)
if ARGV[2] and ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'o', ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
