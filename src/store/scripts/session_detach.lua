-- session_detach: forget holds that are no longer held (after
-- session.lua; keys there). A field is only removed if it still has the
-- value the caller saw: a hold attached again since (a new acquire in the
-- same session) stays attached.
--
-- ARGV  pairs: field, value
--
-- Returns  how many holds were detached
local detached = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    detached = detached + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return detached
