-- leases: the reclaim floor of a zset of leases (holder → the end of its
-- lease, ms on Redis's clock), for the primitives whose scripts reclaim
-- ended leases before they read (read-write locks' readers, semaphores'
-- holds). Joined after queue.lua (its `now`) and before the primitive's
-- library.
--
-- Field `soonest` of the primitive's hash (the one that expires with the
-- leases) is the floor: no lease in the zset ends before it. Until `now`
-- reaches it no lease can have ended, and a call reads no lease to find
-- out: the common case of an object whose holds all have time left costs
-- no scan. Every script that writes a lease ending before the floor
-- lowers it (floor_field, lower_floor); a lease that ends, is dropped or
-- is moved later leaves it a true lower bound. Once `now` reaches it, the
-- next call scans and sets it to the end of the first lease left.
--
-- An absent field (a hash this floor has not been kept for yet) is
-- unknown: that call scans. With no lease left the floor is a short
-- horizon ahead (FLOOR_HORIZON_MS), not "never": a lease written by a
-- script that does not keep the floor (an instance of an older version,
-- during a rollout) is found within it.
local FLOOR_HORIZON_MS = 1000

-- The floor as this call knows it (nil: not read yet), and as text when
-- it is a value read from Redis (the field, or a lease's end), so that
-- writing it back costs no formatting (time_text in holds.lua).
local FLOOR = nil
local FLOOR_TEXT = nil

-- True when this call found no lease left in the zset (a scan, or the
-- caller knew there are no holds), before it wrote one.
local NO_LEASE = false

-- Set by a caller that saw the zset of leases absent (an EXISTS), before
-- anything wrote to it: ended_leases then scans nothing.
local LEASES_ABSENT = false

-- How many of the first leases a scan reads at once: the ended ones and
-- the first one left, in one call, while no more than this have ended
-- (and the last rank of that page, as text).
local FLOOR_PAGE = 8
local FLOOR_PAGE_LAST = '7'

-- The holders of `leases` whose lease ended (still in the zset), given
-- the floor `soonest` read from `hash` (false or nil: unknown); nil when
-- the floor is ahead (none can have ended: the common case, which makes
-- no table). Sets FLOOR, and writes it when the field was there (so is
-- the hash then).
local function ended_leases(hash, leases, soonest)
  if soonest and soonest + 0 > now then
    FLOOR, FLOOR_TEXT = soonest + 0, soonest
    return nil
  end
  if LEASES_ABSENT then
    -- What a scan of an absent zset finds: no lease ended, none left.
    LEASES_ABSENT = false
    FLOOR, FLOOR_TEXT, NO_LEASE = now + FLOOR_HORIZON_MS, nil, true
    return nil
  end
  local first = redis.call('ZRANGE', leases, '0', FLOOR_PAGE_LAST, 'WITHSCORES')
  local gone, next_end, next_text = {}, nil, nil
  for i = 1, #first, 2 do
    local ends = tonumber(first[i + 1])
    if ends > now then
      next_end, next_text = ends, first[i + 1]
      break
    end
    gone[#gone + 1] = first[i]
  end
  if not next_end and #first == 2 * FLOOR_PAGE then
    -- More ended than one page: all of them, then the first one left.
    gone = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
    local left = redis.call('ZRANGEBYSCORE', leases, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    next_end, next_text = tonumber(left[2]), left[2]
  end
  FLOOR, FLOOR_TEXT = next_end or (now + FLOOR_HORIZON_MS), next_text
  -- (The ended ones are the caller's to drop.)
  NO_LEASE = next_end == nil
  if soonest then
    redis.call('HSET', hash, 'soonest', FLOOR_TEXT or FLOOR)
  end
  return gone
end

-- Appends the floor to `fields` (field, value, ... of an HSET of `hash`
-- the caller makes anyway), lowered to `ends` when given (a lease written
-- by this call ends then). Writing it on every grant keeps it known in a
-- hash the grant created. An unknown floor is not written, and one there
-- goes (the next call scans).
local function floor_field(hash, fields, ends)
  if FLOOR == nil then
    redis.call('HDEL', hash, 'soonest')
    return
  end
  if ends and ends < FLOOR then
    FLOOR, FLOOR_TEXT = ends, nil
  end
  fields[#fields + 1] = 'soonest'
  fields[#fields + 1] = FLOOR_TEXT or FLOOR
end

-- A lease of `hash`'s zset now ends at `ends`: lowers the floor to it
-- when it is earlier (unknown floor: the field goes, and the next call
-- scans).
local function lower_floor(hash, ends)
  if FLOOR == nil then
    redis.call('HDEL', hash, 'soonest')
  elseif ends < FLOOR then
    FLOOR, FLOOR_TEXT = ends, nil
    redis.call('HSET', hash, 'soonest', ends)
  end
end
