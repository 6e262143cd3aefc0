-- session_state: read a session (after session.lua; keys there).
-- Read-only.
--
-- Returns  {ttl, pttl, version, field, value, ...} with every attached
--          hold, or {} when the session does not exist
local h = redis.call('HMGET', KEYS[1], 'ttl', 'v')
if not h[1] then
  return {}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then pttl = 0 end
local reply = {tonumber(h[1]), pttl, tonumber(h[2])}
for _, item in ipairs(holds()) do
  reply[#reply + 1] = item
end
return reply
