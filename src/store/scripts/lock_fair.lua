-- lock_fair: the hooks of a fair lock, run before the body of every
-- lock-family script (lock_acquire, lock_release, lock_undo, ...): the
-- same bodies as plain locks, plus a queue in arrival order.
--
-- The family's common arguments, the same in every script:
-- ARGV[1]  wake channel {prefix}{name}:fair:wake
-- ARGV[2]  holder id ('' where the script has none)
-- ARGV[3]  queue grace in ms: how long an entry outlives its last poll
-- ARGV[4]  time the request may still wait, in ms ('' where none)
--
-- Keys besides the body's own (KEYS[1] hash, KEYS[2] fence, KEYS[3] marker):
-- KEYS[4]  queue      zset  holder → ticket (arrival order; a ticket is kept
--                           across polls while the entry lives)
-- KEYS[5]  deadlines  zset  holder → ms on Redis's clock after which the
--                           entry is dropped: the end of its request's wait
--                           plus the grace, so a waiter that polls again in
--                           time keeps its place and a crashed one is dropped
-- KEYS[6]  tickets    counter of tickets handed out
-- All three expire with the last deadline.
--
-- Wake messages on ARGV[1]: '<limit>|<due>|<t1>,<t2>,...' where t1.. are
-- the first tickets of the queue in order (positions), <limit> the ticket
-- that may take the lock now (0: none; only the head, never a herd) and
-- <due> the ms until that head's entry lapses, after which the next in line
-- may go (0 when no one may go).
--
-- Every time here comes from Redis's clock (TIME), never a client's.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local SHOWN = 100

-- Drops the entries whose deadline has passed; how many.
local function prune()
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
  for i = 1, #gone, 1000 do
    redis.call('ZREM', KEYS[4], unpack(gone, i, math.min(i + 999, #gone)))
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  end
  return #gone
end

-- The queue's keys live exactly as long as its last entry.
local function expire_queue()
  local last = redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')
  if last[2] then
    local ttl = tonumber(last[2]) - now + 1
    redis.call('PEXPIRE', KEYS[4], ttl)
    redis.call('PEXPIRE', KEYS[5], ttl)
    redis.call('PEXPIRE', KEYS[6], ttl)
  else
    redis.call('DEL', KEYS[4], KEYS[5], KEYS[6])
  end
end

-- Publishes the queue's order (nothing when it is empty); with free, lets
-- its head take the lock.
local function announce(free)
  local first = redis.call('ZRANGE', KEYS[4], 0, SHOWN - 1, 'WITHSCORES')
  local tickets = {}
  for i = 2, #first, 2 do
    tickets[#tickets + 1] = first[i]
  end
  if not tickets[1] then
    return
  end
  local limit, due = '0', 0
  if free and tickets[1] then
    limit = tickets[1]
    due = tonumber(redis.call('ZSCORE', KEYS[5], first[1])) - now
  end
  redis.call('PUBLISH', ARGV[1], limit .. '|' .. due .. '|' .. table.concat(tickets, ','))
end

-- Keeps (or makes, at the tail) the holder's entry; its deadline becomes
-- the end of this request's wait plus the grace. Returns its ticket.
local function enter(holder)
  local ticket = redis.call('ZSCORE', KEYS[4], holder)
  if not ticket then
    ticket = redis.call('INCR', KEYS[6])
    redis.call('ZADD', KEYS[4], ticket, holder)
  end
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[4]) + tonumber(ARGV[3]), holder)
  expire_queue()
  return tonumber(ticket)
end

-- The reply to a holder that must wait: {0, retry_after_ms, position,
-- ticket, recheck_ms}. retry_after_ms is the hint for clients, capped at
-- half the grace so that one who follows it keeps its place; recheck_ms
-- is when this waiter should look again by itself (0: only when woken).
local function waiting(holder, pttl, free)
  local ticket = enter(holder)
  local position = redis.call('ZRANK', KEYS[4], holder)
  local cap = math.floor(tonumber(ARGV[3]) / 2)
  local hint = pttl
  if hint < 0 or hint > cap then
    hint = cap
  end
  local recheck = 0
  if position == 0 then
    recheck = hint
  elseif position == 1 and free then
    local head = redis.call('ZRANGE', KEYS[4], 0, 0)
    recheck = tonumber(redis.call('ZSCORE', KEYS[5], head[1])) - now + 1
  end
  return {0, hint, position, ticket, recheck}
end

local function admit(holder)
  if prune() > 0 then
    announce(true)
  end
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)
  if not head[1] or head[1] == holder then
    return nil
  end
  return waiting(holder, 0, true)
end

local function on_grant(holder)
  if redis.call('ZREM', KEYS[4], holder) == 1 then
    redis.call('ZREM', KEYS[5], holder)
    expire_queue()
    announce(false)
  end
end

local function on_blocked(holder, pttl)
  if prune() > 0 then
    announce(false)
  end
  return waiting(holder, pttl, false)
end

local function on_free()
  prune()
  expire_queue()
  announce(true)
end
