-- lock: the operations of the lock family on one lock, as functions of
-- that lock's keys, so that the single-lock scripts (lock_acquire,
-- lock_release, lock_undo, lock_heartbeat, lock_force_unlock) and the
-- multi-lock scripts (multi_*), which run them on several locks at once,
-- share one body. Joined after a kind's hooks (lock_plain or lock_fair:
-- admit, on_grant, on_blocked, on_free).
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
--
-- Invariants: at most one holder; the hash exists only with a TTL (its
-- lease, measured by Redis's own clock); tokens come only from INCR on the
-- fence key, so they strictly increase across holders, expiries, force
-- unlocks and deletion of the hash; the lock is free exactly when the hold
-- count reaches 0, and every transition to free notifies the waiters.

-- Takes the lock, or re-enters it as its holder.
-- Returns {1, token, hold_count, lease_ms} (a repeat of the attempt returns
-- its first grant), {0, ...} the hook's reply when it must wait (plain
-- locks: {0, pttl of the holder's lease}), or {-1} when the attempt was
-- already given up.
local function acquire(hash, fence, marker, holder, lease, id)
  if redis.call('EXISTS', marker) == 1 then
    return {-1}
  end
  local attempt = 'a:' .. id
  local h = redis.call('HMGET', hash, 'holder', 'count', 'token', 'lease', attempt)
  if not h[1] then
    local wait = admit(holder)
    if wait then
      return wait
    end
    local token = redis.call('INCR', fence)
    redis.call('HSET', hash, 'holder', holder, 'count', 1, 'token', token,
      'lease', lease, attempt, 1)
    redis.call('PEXPIRE', hash, lease)
    on_grant(holder)
    return {1, token, 1, tonumber(lease)}
  end
  if h[1] ~= holder then
    return on_blocked(holder, redis.call('PTTL', hash))
  end
  if h[5] then
    return {1, tonumber(h[3]), tonumber(h[2]), tonumber(h[4])}
  end
  local count = redis.call('HINCRBY', hash, 'count', 1)
  redis.call('HSET', hash, 'lease', lease, attempt, count)
  redis.call('PEXPIRE', hash, lease)
  return {1, tonumber(h[3]), count, tonumber(lease)}
end

-- Drops one hold (every hold with `all`) of the holder.
-- Returns {-1} when not held by it, {1, 0} when the lock became free,
-- {0, hold_count} when the holder keeps hold_count holds. Holds go latest
-- first: the attempt record of a dropped hold goes with it, so undo never
-- gives back a released hold.
local function release(hash, channel, holder, all)
  local h = redis.call('HMGET', hash, 'holder', 'count')
  if h[1] ~= holder then
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

-- Renews the holder's lease: to `lease` ms, or ('') for the lease it has.
-- Returns {1, token, hold_count, lease_ms}, or {0} when not held by it (an
-- expired hold cannot be revived: the hash is gone).
local function renew(hash, holder, lease)
  local h = redis.call('HMGET', hash, 'holder', 'count', 'token', 'lease')
  if h[1] ~= holder then
    return {0}
  end
  if lease == '' then
    lease = h[4]
  else
    redis.call('HSET', hash, 'lease', lease)
  end
  redis.call('PEXPIRE', hash, lease)
  return {1, tonumber(h[3]), tonumber(h[2]), tonumber(lease)}
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
