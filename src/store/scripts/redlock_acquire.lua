-- redlock_acquire: one RedLock node's part of an acquire (see the book's
-- "RedLock" (docs/src/redlock.md)). Every node runs it on its own; the
-- service counts the grants and decides about the quorum.
--
-- KEYS[1]  lock hash  {prefix}{name}:redlock
--          fields: holder, token (the grant's fencing token once known),
--          lease (ms), attempt (the id of the try that created the hold),
--          and for a hold taken in a session: s (the session), sv (the
--          highest version of its state applied: older renewals are
--          ignored), se (when the session ends by it, ms on this node's
--          clock: a direct heartbeat renews no further)
-- KEYS[2]  fence      {prefix}{name}:redlock:fence  (this node's counter;
--                     never expires)
-- KEYS[3]  tombstone  {prefix}{name}:redlock:undone:<attempt id>
-- ARGV[1]  holder id
-- ARGV[2]  lease in milliseconds (in a session: the session's end, ms on
--          the session's Redis clock; the lease here is what is left of it
--          on this node's clock, 1 ms when nothing is)
-- ARGV[3]  attempt id (unique per try)
-- ARGV[4]  the session the hold is taken in, or '' for none
-- ARGV[5]  the version of the session's state that end comes from, or ''
--          for none
-- ARGV[6]  the hold's owner label, or '' for none (fields o and t: see
--          holds.lua, joined before this file)
--
-- Returns  {1, token}   granted here: a new hold whose token is this node's
--                       next counter value
--          {2, token}   re-entered: this holder already held it here; the
--                       lease is renewed and the hold keeps its token
--          {0, pttl, owner}  another holder holds it here for pttl more ms
--                       (-1: someone removed the TTL by hand); owner: its
--                       hold's owner label ('' for none)
--          {-1}         this attempt was already given up (redlock_undo ran
--                       first): nothing granted
--          {-5}         this holder holds it here in another session, or in
--                       none (or the reverse): nothing changed
--
-- Invariants: at most one holder per node; the hash exists only with a
-- TTL; this node's tokens come only from INCR on its fence (and
-- redlock_fence, which only raises it). Running the same attempt twice
-- grants once.
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {-1}
end
local session, version = ARGV[4] or '', ARGV[5]
local lease = ARGV[2]
if session ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  lease = math.max(tonumber(ARGV[2]) - now, 1)
end
-- Records the session and when it ends by `version`.
local function in_session()
  if session ~= '' then
    redis.call('HSET', KEYS[1], 's', session, 'sv', version, 'se', ARGV[2])
  end
end
local h = redis.call('HMGET', KEYS[1], 'holder', 'token', 'attempt', 's', 'sv', 'o')
if not h[1] then
  local token = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', token, 'lease', lease,
    'attempt', ARGV[3], 't', time_text(redis.call('TIME')))
  redis.call('PEXPIRE', KEYS[1], lease)
  in_session()
  record_owner(KEYS[1], '', ARGV[6], true)
  return {1, token}
end
if h[1] ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1]), h[6] or ''}
end
if h[3] == ARGV[3] then
  return {1, tonumber(h[2])}
end
if (h[4] or '') ~= session then
  return {-5}
end
record_owner(KEYS[1], '', ARGV[6], false)
if session == '' or tonumber(version) >= tonumber(h[5]) then
  redis.call('HSET', KEYS[1], 'lease', lease)
  redis.call('PEXPIRE', KEYS[1], lease)
  in_session()
end
return {2, tonumber(h[2])}
