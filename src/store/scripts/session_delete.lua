-- session_delete: remove a session (after session.lua; keys there), once
-- the service has released the holds it found attached. Holds attached
-- meanwhile are returned so that they are released too.
--
-- Returns  {1, field, value, ...} with the holds still attached, or {0}
--          when the session does not exist
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
local reply = {1}
for _, item in ipairs(holds()) do
  reply[#reply + 1] = item
end
redis.call('DEL', KEYS[1])
return reply
