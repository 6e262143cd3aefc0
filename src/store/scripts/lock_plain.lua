-- lock_plain: the hooks of a plain (unfair) lock, run before the body of
-- every lock-family script (lock_acquire, lock_release, lock_undo, ...)
-- and of the multi-lock scripts.
--
-- The family's common arguments, the same in every script:
-- ARGV[1]  wake channel {prefix}{name}:lock:wake
-- ARGV[2]  holder id ('' where the script has none)
-- ARGV[3]  queue grace in ms (fair locks only; '' here)
-- ARGV[4]  time the request may still wait, in ms (fair locks only; '' here)
--
-- A plain lock keeps no queue: whoever tries first when it is free takes it.

-- Was the attempt given up (its marker exists)?
local function given_up(marker)
  return redis.call('EXISTS', marker) == 1
end

-- Redis's clock, as TIME's reply, for a grant's time: read only when a
-- grant needs it.
local function grant_clock()
  return redis.call('TIME')
end

-- May the holder take the free lock now? nil: yes; otherwise the reply.
local function admit(holder)
  return nil
end

-- The holder was granted a new hold.
local function on_grant(holder)
end

-- The holder's only hold was given back (undo): a plain lock keeps no
-- places.
local function on_undone(holder)
end

-- The reply when another holder has the lock, whose lease ends in pttl ms
-- and whose owner label is `owner` ('' for none).
local function on_blocked(holder, pttl, owner)
  return {0, pttl, owner}
end

-- The lock became free: wake the waiters on its channel (each instance
-- re-checks once).
local function on_free(channel)
  redis.call(PUBLISH, channel, 'free')
end

-- The holder's hold now ends earlier than it did (a shorter lease): wake
-- the waiters, who look again and so learn when it ends.
local function on_shortened(channel)
  redis.call(PUBLISH, channel, 'free')
end
