-- session_state: read a session (after session.lua; keys there).
-- Read-only; O(1) of the session's holds unless they are asked for.
--
-- ARGV[1]  'holds' to list the attached holds too (deletion), else ''
--
-- Returns  {ttl, pttl, version, holds, end, owner} (holds: how many are
--          attached; end: when the session ends, ms on Redis's clock;
--          owner: its owner label, '' for none), then
--          with 'holds' every attached hold as field, value, ...; or {}
--          when the session does not exist
local h = redis.call('HMGET', KEYS[1], 'ttl', 'v', 'o')
if not h[1] then
  return {}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then pttl = 0 end
local reply = {tonumber(h[1]), pttl, tonumber(h[2]), count(), ends(), h[3] or ''}
if ARGV[1] == 'holds' then
  for _, item in ipairs(holds()) do
    reply[#reply + 1] = item
  end
end
return reply
