-- hold_session: the session of a holder's hold, for the primitives that
-- keep several holders' holds in one hash (read-write locks: KEYS[1];
-- semaphores: KEYS[7]). Joined after queue.lua (its `now`) and before the
-- primitive's library. See the book's "Sessions" (docs/src/sessions.md).
--
-- Fields of `hash`, for a holder <h> whose hold was taken in a session
-- (an rwlock holder's read and write holds are in one session or none):
--   ss|<h>  the session
--   sv|<h>  the highest version of the session's state applied to the
--           hold: a renewal of an older version is ignored, so a slow
--           session heartbeat never outruns a later one
--   se|<h>  when the session ends by that version (ms, Redis clock): a
--           direct heartbeat renews the hold no further

-- The session the holder's hold was taken in ('' for none).
local function session_of(hash, holder)
  return redis.call('HGET', hash, 'ss|' .. holder) or ''
end

-- Whether a renewal by the holder's session at `version` is newer than
-- what its hold has applied.
local function newer(hash, holder, version)
  local sv = redis.call('HGET', hash, 'sv|' .. holder)
  return not sv or tonumber(version) >= tonumber(sv)
end

-- Records that the holder's hold is in `session` at `version`, by which
-- the session ends `lease` ms from now.
local function in_session(hash, holder, session, version, lease)
  redis.call('HSET', hash, 'ss|' .. holder, session, 'sv|' .. holder, version,
    'se|' .. holder, now + lease)
end

-- When the holder's session ends by what its hold applied (ms), or nil.
local function session_end(hash, holder)
  return tonumber(redis.call('HGET', hash, 'se|' .. holder))
end

-- The fields of the holder's session (for an HDEL of more fields).
local function session_fields(holder)
  return 'ss|' .. holder, 'sv|' .. holder, 'se|' .. holder
end

-- Forgets the holder's session (its hold is gone).
local function drop_session(hash, holder)
  redis.call('HDEL', hash, session_fields(holder))
end
