-- sem: the state of a semaphore with leased permits, and what every
-- semaphore script shares (joined after queue.lua, whose queue holds the
-- waiters: members are '<permits>|<holder>').
--
-- The common arguments, the same in every semaphore script:
-- ARGV[1]  wake channel {prefix}{name}:sem:wake
-- ARGV[2]  holder id ('' where the script has none)
-- ARGV[3]  queue grace in ms
-- ARGV[4]  time the request may still wait, in ms ('' where none)
--
-- KEYS[1]  hash {prefix}{name}:sem  the configuration (never expires; only
--          DELETE removes it)
--          permits       the number of permits
--          oh, oc        the waiter at the head of the queue when it was
--                        last overtaken, and how many times it was (see
--                        walk)
-- KEYS[2]  fence {prefix}{name}:sem:fence (counter; never expires)
-- KEYS[3]  the attempt's marker (acquire, undo), else KEYS[1] again
-- KEYS[4..6]  the queue (queue.lua)
-- KEYS[7]  hash {prefix}{name}:sem:holds  the holds
--          used          permits held, summed over the live holds
--          p|<h>, c|<h>  a holder's permits and its number of grants
--          t|<h>, l|<h>  its fencing token and lease (ms)
--          as|<h>        the attempts that made its grants (space-separated)
--          a|<attempt>   the permits that attempt was granted
--          ss|<h>, sv|<h>, se|<h>  a hold taken in a session
--                        (hold_session.lua, joined before this file)
--          oh|<h>, th|<h>  its owner label and grant time (holds.lua,
--                        suffix 'h|<h>': t|<h> is the token)
--          soonest       the leases' reclaim floor (leases.lua)
--          kept          ms on Redis's clock until which both keys live
--                        at least (a lower bound of their expiry; see
--                        extend_holds)
-- KEYS[8]  zset {prefix}{name}:sem:leases  holder → its lease's deadline
--
-- Expired holds are reclaimed by every script before it reads, on Redis's
-- clock, so `used` only counts live leases. The holds and the leases
-- live at least as long as every lease, and go with the last hold.

-- How many times the head of the queue may be overtaken by later waiters
-- (or new requests) that fit while it does not; after that, nobody is
-- served before it.
local OVERTAKES = 16

local function configured_permits()
  return (redis.call('HGET', KEYS[1], 'permits') or 0) + 0
end

local function used()
  return (redis.call('HGET', KEYS[7], 'used') or 0) + 0
end

local function available()
  return math.max(configured_permits() - used(), 0)
end

-- The permits a queue member waits for.
local function need_of(member)
  return tonumber(string.match(member, '^(%d+)|'))
end

-- Drops a holder's fields from the holds (its session's too, unless
-- `sessionless`: the caller read that it has none), given its permits and
-- attempts `h` ({p|<h>, as|<h>}); returns the permits.
local function drop_fields(holder, h, sessionless)
  local ids = h[2] or ''
  -- (One attempt, the common case: its field joins the table as it is
  -- made, with no search of the text.)
  local one = ids ~= '' and not string.find(ids, ' ', 1, true)
  local fields = {'p|' .. holder, 'c|' .. holder, 't|' .. holder, 'l|' .. holder, 'as|' .. holder,
    'oh|' .. holder, 'th|' .. holder, one and ('a|' .. ids) or nil}
  if not sessionless then
    for _, f in ipairs({session_fields(holder)}) do
      fields[#fields + 1] = f
    end
  end
  if not one then
    for id in string.gmatch(ids, '%S+') do
      fields[#fields + 1] = 'a|' .. id
    end
  end
  redis.call('HDEL', KEYS[7], unpack(fields))
  local permits = (h[1] or 0) + 0
  if permits > 0 then
    redis.call('HINCRBY', KEYS[7], 'used', '-' .. h[1])
  end
  return permits
end

-- Drops a holder's hold; returns the permits it had.
local function drop_holder(holder)
  local h = redis.call('HMGET', KEYS[7], 'p|' .. holder, 'as|' .. holder)
  redis.call('ZREM', KEYS[8], holder)
  return drop_fields(holder, h)
end

-- Reclaims the permits of the holds whose lease ended; true if any did.
-- The caller passes the holds' reclaim floor (leases.lua) and `used` when
-- it read them (false: absent); with neither, they are read here.
local function drop_expired(...)
  local soonest, held = ...
  if select('#', ...) == 0 then
    local f = redis.call('HMGET', KEYS[7], 'soonest', 'used')
    soonest, held = f[1], f[2]
  end
  if not held then
    -- No holds, and the leases go with them: nothing to reclaim.
    FLOOR, NO_LEASE = now + FLOOR_HORIZON_MS, true
    return false
  end
  local gone = ended_leases(KEYS[7], KEYS[8], soonest)
  if not gone then
    return false
  end
  for _, holder in ipairs(gone) do
    drop_holder(holder)
  end
  return #gone > 0
end

-- Remaining ms of the lease that ends first (0 when nothing is held).
local function first_lease_ends()
  local first = redis.call('ZRANGE', KEYS[8], 0, 0, 'WITHSCORES')
  if first[2] then
    return math.max(tonumber(first[2]) - now, 0)
  end
  return 0
end

-- After holds were dropped: the holds and the leases go when no permit
-- is held any more. While some are, the keys' TTL outlasts every lease
-- already (extend_holds).
local function expire_holds()
  if used() <= 0 then
    redis.call('DEL', KEYS[7], KEYS[8])
  end
end

-- A lease now ends at `ends` (ms, Redis clock): the holds and the leases
-- live at least as long. Their TTL is only ever extended (GT), never
-- shortened to the lease that ends last, so it stays past every lease
-- with no read of which one that is; it may outlast the last lease by
-- what a shortened lease gave up, or by up to a lease where a grant
-- extended it past its own (`kept`, sem_acquire.lua), until the last
-- hold's release deletes the keys. Keys this call created (`fresh`) have
-- no TTL yet, which GT would keep. `ttl`: the ms from now to `ends` as
-- text, when the caller has it (time_text in holds.lua). Neither
-- shortens a TTL, so `kept` stays a lower bound of it.
local function extend_holds(ends, fresh, ttl)
  ttl = ttl or math.max(ends - now, 1)
  if fresh then
    redis.call('PEXPIRE', KEYS[7], ttl)
    redis.call('PEXPIRE', KEYS[8], ttl)
  else
    redis.call('PEXPIRE', KEYS[7], ttl, 'GT')
    redis.call('PEXPIRE', KEYS[8], ttl, 'GT')
  end
end

-- How many more times the queue's head may be overtaken.
local function overtakes_left(head)
  if not head then
    return OVERTAKES
  end
  local o = redis.call('HMGET', KEYS[1], 'oh', 'oc')
  if o[1] == head then
    return OVERTAKES - tonumber(o[2])
  end
  return OVERTAKES
end

-- Walks the queue in order with the available permits: a waiter that fits
-- is served (its permits are set aside for it); one that does not fit is
-- passed over, which lets the waiters behind it that fit overtake it, as
-- long as the head has been overtaken fewer than OVERTAKES times — then
-- the walk stops and nobody behind is served before the head.
--
-- With a member (its permits `need`; queued, or a newcomer at the tail),
-- stops at it. `free` is the available permits when the caller has read
-- them (else nil). Returns the tickets served before it, the tickets
-- passed over before the last of those (both nil where the queue does
-- not exist), whether the member is served now, whether that overtakes
-- someone, and whether the queue is empty.
local function walk(member, need, free)
  if queue_absent() then
    -- Nobody waits (and no table is made): only the permits decide.
    return nil, nil, member ~= nil and need <= (free or available()), false, true
  end
  local members, tickets = first_entries()
  if not members[1] then
    -- Nobody waits: only the permits decide.
    local go = member ~= nil and need <= (free or available())
    return {}, {}, go, false, true
  end
  free = free or available()
  local left = overtakes_left(members[1])
  local served, skipped, passed = {}, {}, {}
  local shown = #members
  for i, m in ipairs(members) do
    if m == member then
      shown = 0
      break
    end
    local wants = need_of(m)
    if wants <= free and (#passed == 0 or left > 0) then
      free = free - wants
      served[#served + 1] = tickets[i]
      if #passed > 0 then
        left = left - 1
        for _, t in ipairs(passed) do
          skipped[#skipped + 1] = t
        end
        passed = {}
      end
    else
      passed[#passed + 1] = tickets[i]
      if left <= 0 then
        return served, skipped, false, false
      end
    end
  end
  if not member then
    return served, skipped, false, false
  end
  -- A newcomer behind more waiters than the walk sees waits its turn.
  if shown >= SHOWN and redis.call('ZCARD', KEYS[4]) > SHOWN then
    return served, skipped, false, false
  end
  local go = need <= free and (#passed == 0 or left > 0)
  return served, skipped, go, go and #passed > 0
end

-- Counts one overtake of the queue's head.
local function overtaken()
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if redis.call('HGET', KEYS[1], 'oh') == head then
    redis.call('HINCRBY', KEYS[1], 'oc', 1)
  else
    redis.call('HSET', KEYS[1], 'oh', head, 'oc', 1)
  end
end

-- Publishes the queue and lets go the waiters the available permits
-- serve now (see walk); the waiters passed over before them stay put.
local function wake()
  if queue_absent() then
    return
  end
  local members, tickets = first_entries()
  if not tickets[1] then
    return
  end
  local served, skipped = walk(nil, 0)
  local limit = 0
  if served[1] then
    limit = tonumber(served[#served])
  end
  announce(members, tickets, limit, skipped)
end

-- Wakes every waiter to look again (the configuration changed: some may
-- now be served, and some may now ask for more than there are permits).
local function wake_all()
  redis.call(PUBLISH, ARGV[1], '0|0|')
end

-- {1, token, permits, lease_ms, grants} for a holder's hold.
local function grant_reply(holder)
  local h = redis.call('HMGET', KEYS[7], 't|' .. holder, 'p|' .. holder, 'l|' .. holder, 'c|' .. holder)
  return {1, tonumber(h[1]), tonumber(h[2]), tonumber(h[3]), tonumber(h[4])}
end

-- The live holds as a state read reports them (holds.lua's hold_entry),
-- at most `limit`, by the end of their lease.
local function hold_entries(limit)
  local entries = {}
  local leases = redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. now, '+inf', 'WITHSCORES',
    'LIMIT', 0, limit)
  for i = 1, #leases, 2 do
    local h = leases[i]
    local f = redis.call('HMGET', KEYS[7], 'p|' .. h, 'oh|' .. h, 'th|' .. h)
    entries[#entries + 1] = hold_entry(f[2], tonumber(leases[i + 1]) - now, f[3],
      session_of(KEYS[7], h), f[1], nil)
  end
  return entries
end

-- The owners of the holds of permits (at most 10; '' for a hold without
-- one) but the requesting holder's own: what blocks a request that does
-- not fit.
local function blocking_owners(holder)
  local owners = {}
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. now, '+inf', 'LIMIT', 0, 11)) do
    if h ~= holder and #owners < 10 then
      owners[#owners + 1] = redis.call('HGET', KEYS[7], 'oh|' .. h) or ''
    end
  end
  return owners
end

-- {permits, available, holders, queued, holds}: the public state, with
-- the queue's length (queue_length) and at most 100 holds. Never a holder
-- id or session id.
local function state_reply()
  return {configured_permits(), available(), redis.call('ZCARD', KEYS[8]), queue_length(),
    hold_entries(100)}
end

-- Sessions (the book's "Sessions" (docs/src/sessions.md); hold_session.lua).

-- Sets the holder's lease to end at `deadline` (ms, Redis clock), with
-- the reclaim floor and the keys' TTL; wakes the queue when it now ends
-- earlier than it did, so that the waiters look again by then. `ttl` as
-- in extend_holds.
local function set_deadline(holder, deadline, ttl)
  local before = tonumber(redis.call('ZSCORE', KEYS[8], holder))
  redis.call('ZADD', KEYS[8], deadline, holder)
  lower_floor(KEYS[7], deadline)
  extend_holds(deadline, false, ttl)
  if before and deadline < before then
    wake()
  end
end
