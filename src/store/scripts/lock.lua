-- lock: the operations of the lock family on one lock, as functions of
-- that lock's keys, so that the single-lock scripts (lock_acquire,
-- lock_release, lock_undo, lock_heartbeat, lock_force_unlock) and the
-- multi-lock scripts (multi_*), which run them on several locks at once,
-- share one body. Joined after a kind's hooks (lock_plain or lock_fair:
-- given_up, grant_clock, admit, on_grant, on_blocked, on_free,
-- on_shortened, on_undone).
--
-- A lock's keys:
--   hash    {prefix}{name}:lock (fair: :fair); fields holder, count (hold
--           count), token (fencing), lease (ms), and one 'a:<attempt id>'
--           per hold still counted, whose value is the hold count that
--           attempt reached (see undo)
--   fence   {prefix}{name}:lock:fence (counter; never expires)
--   marker  {prefix}{name}:lock:undone:<attempt id> (that attempt was
--           given up: it must grant nothing should it still arrive)
--   channel {prefix}{name}:lock:wake (pub/sub)
--   The hold's owner label and grant time are the fields o and t
--   (holds.lua, joined first, says how they are kept).
--   A hold taken in a session (the book's "Sessions"
--   (docs/src/sessions.md)) also records it in the hash: s (the session),
--   sv (the highest version of the session's state applied to the hold: a
--   renewal of an older version is ignored, so a slow earlier session
--   heartbeat never outruns a later one) and se (when the session ends as
--   of that version, in ms on this node's clock: a direct heartbeat renews
--   the hold no further).
--
-- Invariants: at most one holder; the hash exists only with a TTL (its
-- lease, measured by Redis's own clock); tokens come only from INCR on the
-- fence key, so they strictly increase across holders, expiries, force
-- unlocks and deletion of the hash; the lock is free exactly when the hold
-- count reaches 0, and every transition to free notifies the waiters, as
-- does every renewal that makes the hold end earlier than it did; a hold
-- is in one session or none, and only that session renews or releases it
-- on the session's behalf.

-- Sets the hold to end `lease` ms from now; when it now ends earlier than
-- it did, its waiters are told (on_shortened), so they look again by then.
local function set_lease(hash, channel, lease)
  local before = redis.call('PTTL', hash)
  redis.call('PEXPIRE', hash, lease)
  if before > tonumber(lease) then
    on_shortened(channel)
  end
end

-- Whether a renewal by a session at `version` is newer than what the hold
-- has applied (`sv`, nil when it has none).
local function newer(sv, version)
  return not sv or tonumber(version) >= tonumber(sv)
end

-- Records in a hold just taken or renewed in `session` ('' for none) the
-- version applied and when the session ends by it (`ends`, ms).
local function in_session(hash, session, version, ends)
  if session ~= '' then
    redis.call('HSET', hash, 's', session, 'sv', version, 'se', ends)
  end
end

-- Takes the lock, or re-enters it as its holder, in `session` ('' for
-- none; `version`: the version of the session's state the lease comes
-- from, '' without a session). In a session `lease` is the session's end
-- (ms, Redis clock) and the hold's lease what is left of it now (1 ms
-- when nothing is: the session is gone, and so is the hold by then).
-- Returns {1, token, hold_count, lease_ms} (a repeat of the attempt returns
-- its first grant), {0, ...} the hook's reply when it must wait (plain
-- locks: {0, pttl of the holder's lease}), {-1} when the attempt was
-- already given up, or {-5} when the holder holds the lock in another
-- session, or in one while this acquire is in none (or the reverse):
-- nothing changes then. A re-entry in a session whose hold has applied a
-- newer version keeps the hold's end (and answers what is left of it).
-- `owner` is the hold's owner label ('' or nil: none; a re-entry without
-- one keeps the label the hold has); a hold that blocks is named to the
-- hook by its label.
local function acquire(hash, fence, marker, holder, lease, id, channel, session, version, owner)
  session = session or ''
  if given_up(marker) then
    return {-1}
  end
  local ends = lease
  if session ~= '' then
    lease = math.max(tonumber(ends) - holds_now(), 1)
  end
  local attempt = 'a:' .. id
  local h = redis.call('HMGET', hash, 'holder', 'count', 'token', 'lease', attempt, 's', 'sv', 'o')
  if not h[1] then
    local wait = admit(holder)
    if wait then
      return wait
    end
    local token = redis.call('INCR', fence)
    -- (Text where there is the text: time_text in holds.lua.)
    redis.call('HSET', hash, 'holder', holder, 'count', '1', 'token', token,
      'lease', lease, attempt, '1', 't', time_text(grant_clock()))
    redis.call('PEXPIRE', hash, lease)
    in_session(hash, session, version, ends)
    record_owner(hash, '', owner, true)
    on_grant(holder)
    return {1, token, 1, tonumber(lease)}
  end
  if h[1] ~= holder then
    return on_blocked(holder, redis.call('PTTL', hash), h[8] or '')
  end
  if h[5] then
    return {1, tonumber(h[3]), tonumber(h[2]), tonumber(h[4])}
  end
  if (h[6] or '') ~= session then
    return {-5}
  end
  local count = redis.call('HINCRBY', hash, 'count', 1)
  redis.call('HSET', hash, attempt, count)
  record_owner(hash, '', owner, false)
  if session ~= '' and not newer(h[7], version) then
    return {1, tonumber(h[3]), count, redis.call('PTTL', hash)}
  end
  redis.call('HSET', hash, 'lease', lease)
  set_lease(hash, channel, lease)
  in_session(hash, session, version, ends)
  return {1, tonumber(h[3]), count, tonumber(lease)}
end

-- Drops one hold (every hold with `all`) of the holder; with `session`
-- (a session ending), only a hold taken in that session.
-- Returns {-1} when not held by it, {1, 0} when the lock became free,
-- {0, hold_count} when the holder keeps hold_count holds. Holds go latest
-- first: the attempt record of a dropped hold goes with it, so undo never
-- gives back a released hold.
local function release(hash, channel, holder, all, session)
  local h = redis.call('HMGET', hash, 'holder', 'count', 's')
  if h[1] ~= holder or (session and h[3] ~= session) then
    return {-1}
  end
  local count = tonumber(h[2]) - 1
  if all or count <= 0 then
    redis.call('DEL', hash)
    on_free(channel)
    return {1, 0}
  end
  local fields = redis.call('HGETALL', hash)
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 'a:' and tonumber(fields[i + 1]) > count then
      redis.call('HDEL', hash, fields[i])
    end
  end
  redis.call('HSET', hash, 'count', count)
  return {0, count}
end

-- Gives back exactly the hold one attempt made, if it still counts, and
-- never another attempt's hold, even of the same holder id (the holds
-- above it each move one level down). Returns 1 when given back, else 0
-- and leaves the marker (for marker_ms) so that the attempt, should it
-- still arrive, grants nothing.
local function undo(hash, marker, channel, holder, id, marker_ms)
  local attempt = 'a:' .. id
  local h = redis.call('HMGET', hash, 'holder', 'count', attempt)
  if h[1] ~= holder or not h[3] then
    redis.call('SET', marker, '1', 'PX', marker_ms)
    return 0
  end
  local count = tonumber(h[2]) - 1
  if count <= 0 then
    redis.call('DEL', hash)
    on_undone(holder)
    on_free(channel)
    return 1
  end
  local fields = redis.call('HGETALL', hash)
  local mine = tonumber(h[3])
  for i = 1, #fields, 2 do
    local level = tonumber(fields[i + 1])
    if string.sub(fields[i], 1, 2) == 'a:' and level > mine then
      redis.call('HSET', hash, fields[i], level - 1)
    end
  end
  redis.call('HDEL', hash, attempt)
  redis.call('HSET', hash, 'count', count)
  return 1
end

-- Renews the holder's lease: to `lease` ms, or ('') for the lease it has;
-- a hold taken in a session no further than the session's end (se).
-- With `session` it is that session's renewal instead (`lease` is the
-- session's end, ms on Redis's clock, `version` the version of the
-- session's state it comes from): the hold's lease becomes what is left
-- until that end, and a renewal that arrives after it (delayed by a stall,
-- or retried) ends the hold now as an expiry would (waiters woken, fence
-- untouched). Only a hold taken in that session counts, and a renewal of
-- an older version than the hold has applied changes nothing.
-- Returns {1, token, hold_count, lease_ms} (lease_ms: what the hold now has
-- left), or {0} when not held by it (or, for a session, not in it, or
-- ended by this renewal). An expired hold cannot be revived: the hash is
-- gone.
local function renew(hash, channel, holder, lease, session, version)
  local h = redis.call('HMGET', hash, 'holder', 'count', 'token', 'lease', 's', 'sv', 'se')
  if h[1] ~= holder or (session and h[5] ~= session) then
    return {0}
  end
  local reply = {1, tonumber(h[3]), tonumber(h[2])}
  if session then
    if newer(h[6], version) then
      local left = tonumber(lease) - holds_now()
      if left <= 0 then
        redis.call('DEL', hash)
        on_free(channel)
        return {0}
      end
      redis.call('HSET', hash, 'lease', left)
      set_lease(hash, channel, left)
      in_session(hash, session, version, lease)
    end
    reply[4] = math.max(redis.call('PTTL', hash), 0)
    return reply
  end
  if lease == '' then
    lease = h[4]
  else
    redis.call('HSET', hash, 'lease', lease)
  end
  lease = tonumber(lease)
  if h[7] then
    lease = math.max(math.min(lease, tonumber(h[7]) - holds_now()), 1)
  end
  set_lease(hash, channel, lease)
  reply[4] = lease
  return reply
end

-- Removes the lock whoever holds it (administrative); 1 when it was held.
-- The fence is untouched: the next holder's token is still larger.
local function force_unlock(hash, channel)
  if redis.call('DEL', hash) == 1 then
    on_free(channel)
    return 1
  end
  return 0
end
