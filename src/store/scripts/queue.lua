-- queue: a queue of waiters kept in Redis, shared by fair locks and
-- read-write locks (joined before their hooks or library).
--
-- KEYS[4]  queue      zset  member → ticket (arrival order; a ticket is
--                           kept across polls while the entry lives)
-- KEYS[5]  deadlines  zset  member → ms on Redis's clock after which the
--                           entry is dropped: the end of its request's wait
--                           plus the grace, so a waiter that polls again in
--                           time keeps its place and a crashed one is dropped
--                           A member that left by a DELETE leaves its
--                           deadline behind as a mark '!<ticket>' (no
--                           holder id starts with '!'; see leave_queue)
-- KEYS[6]  tickets    counter of tickets handed out
-- All three expire with the last deadline.
-- ARGV[1]  wake channel
-- ARGV[3]  queue grace in ms: how long an entry outlives its last poll
--          (an undo's: what is left of it for the place it gives back, see
--          restore_place)
-- ARGV[4]  time the request may still wait, in ms ('' where none). An
--          acquire gets '' when it is a try (`wait_ms` 0): a try takes no
--          place (see waiting); a long-poll's try at its deadline gets '0'
--          and keeps its place. A long-poll's tries after its first blocked
--          reply send '<wait left>|<ticket>': the ticket its latest
--          blocked reply gave (see left_while_open)
--
-- Wake messages on ARGV[1]: '<limit>|<due>|<t1>,<t2>,...[|<s1>,<s2>,...]'
-- where t1.. are the first tickets of the queue in order (positions),
-- <limit> the highest ticket that may try now (0: none), <due> the ms
-- until the first of those loses its place (its grace runs out), after
-- which the next in line may go (0 when no one may go), and s1.. the
-- tickets up to <limit> that may not go (where waiters may be passed
-- over).
--
-- Every time here comes from Redis's clock (TIME), never a client's.
-- (Arithmetic converts the reply's text once; `tonumber` would twice.
-- The same holds for every number read as text below.)
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local SHOWN = 100

-- ARGV[4] parsed once: the wait left ('' for none) and the ticket the
-- request was given earlier (nil for none).
local WAIT_LEFT, SENT_TICKET = ARGV[4] or '', nil
if WAIT_LEFT ~= '' then
  local left, ticket = string.match(WAIT_LEFT, '^(%d*)|(%d+)$')
  if left then
    WAIT_LEFT, SENT_TICKET = left, tonumber(ticket)
  end
end

-- Whether the queue and its deadlines do not exist: nobody waits and no
-- mark is kept. Read once per call (one EXISTS instead of a read of each,
-- the common case of an object nobody waits on); only `enter` adds to
-- them, and it says so.
local QUEUE_ABSENT = nil
local function queue_absent()
  if QUEUE_ABSENT == nil then
    QUEUE_ABSENT = redis.call('EXISTS', KEYS[4], KEYS[5]) == 0
  end
  return QUEUE_ABSENT
end

-- Whether `key` (of the object's slot: an attempt's marker, say) exists,
-- learning with the same call whether the queue does when neither does:
-- the common case, one EXISTS instead of one for the key and one for the
-- queue (queue_absent). With `also` (another key of the object), the same
-- call asks for it too, and a second result says whether none of them
-- exists (then `also` does not either); when something does, whether
-- the queue does stays unknown (queue_absent asks when it matters).
local function exists_besides_queue(key, also)
  local found
  if also then
    found = redis.call('EXISTS', key, KEYS[4], KEYS[5], also)
  else
    found = redis.call('EXISTS', key, KEYS[4], KEYS[5])
  end
  if found == 0 then
    QUEUE_ABSENT = true
    return false, true
  end
  if redis.call('EXISTS', key) == 1 then
    return true, false
  end
  if not also then
    -- What exists is the queue.
    QUEUE_ABSENT = false
  end
  return false, false
end

-- Drops the entries (and marks) whose deadline has passed; returns the
-- entries' members.
local function prune()
  if queue_absent() then
    return {}
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
  for i = 1, #gone, 1000 do
    redis.call('ZREM', KEYS[4], unpack(gone, i, math.min(i + 999, #gone)))
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  end
  local members = {}
  for _, m in ipairs(gone) do
    if string.sub(m, 1, 1) ~= '!' then
      members[#members + 1] = m
    end
  end
  return members
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

-- The first SHOWN entries in order: members and tickets.
local function first_entries()
  if queue_absent() then
    return {}, {}
  end
  local first = redis.call('ZRANGE', KEYS[4], 0, SHOWN - 1, 'WITHSCORES')
  local members, tickets = {}, {}
  for i = 1, #first, 2 do
    members[#members + 1] = first[i]
    tickets[#tickets + 1] = first[i + 1]
  end
  return members, tickets
end

-- Publishes the queue's order (nothing when it is empty) and lets the
-- entries up to ticket `limit` (a number; 0 for none) try now, except
-- those in the optional list `skip` (semaphores: waiters passed over).
local function announce(members, tickets, limit, skip)
  if not tickets[1] then
    return
  end
  local due = 0
  if limit > 0 then
    due = tonumber(redis.call('ZSCORE', KEYS[5], members[1])) - now
  end
  local note = limit .. '|' .. due .. '|' .. table.concat(tickets, ',')
  if skip and skip[1] then
    note = note .. '|' .. table.concat(skip, ',')
  end
  redis.call(PUBLISH, ARGV[1], note)
end

-- Keeps (or makes, at the tail) a member's entry; its deadline becomes
-- the end of this request's wait plus the grace. Returns its ticket.
local function enter(member)
  QUEUE_ABSENT = false
  local ticket = redis.call('ZSCORE', KEYS[4], member)
  if not ticket then
    ticket = redis.call('INCR', KEYS[6])
    redis.call('ZADD', KEYS[4], ticket, member)
  end
  redis.call('ZADD', KEYS[5], now + tonumber(WAIT_LEFT) + tonumber(ARGV[3]), member)
  expire_queue()
  return tonumber(ticket)
end

-- A member's grant was given back (an undo: the try that granted it was
-- cut short, its reply lost) by a long-poll that had a place: ARGV[4] is
-- what its tries send, the wait left and its ticket. The wait left may be
-- 0: a long-poll's last look at its deadline cut short (Redis stalled)
-- answers "not acquired", and such a long-poll keeps its place for the
-- grace like any other, even when the look ran late and granted. The
-- grant took its entry; it gets it back at that ticket, so that whoever
-- came after it stays behind it. The entry lasts ARGV[3] from now: the
-- grace while the request still waits (it polls again sooner: the head is
-- woken; one whose client went away leaves nothing queued beyond the
-- grace), and what is left of the grace after its wait ended once it has
-- (the service sends no place once none is left). Not when it left by a
-- DELETE meanwhile (its mark) or has an entry again. The ticket counter is
-- kept from falling behind it (it went with the queue's last entry), so
-- that later arrivals queue behind it.
local function restore_place(member)
  if not SENT_TICKET or not tonumber(WAIT_LEFT) then
    return
  end
  if redis.call('ZSCORE', KEYS[4], member) or redis.call('ZSCORE', KEYS[5], '!' .. SENT_TICKET) then
    return
  end
  if tonumber(redis.call('GET', KEYS[6]) or '0') < SENT_TICKET then
    redis.call('SET', KEYS[6], SENT_TICKET)
  end
  QUEUE_ABSENT = false
  redis.call('ZADD', KEYS[4], SENT_TICKET, member)
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[3]), member)
  expire_queue()
end

-- Removes a member's entry (it was granted, or with `left` it left by a
-- DELETE: see fair_leave, rw_leave, sem_leave); true if it had one. A
-- member that left keeps its deadline as the mark '!<ticket>', so that a
-- request of it still open learns it left (see left_while_open); the mark
-- lasts as long as that request can.
local function leave_queue(member, left)
  if queue_absent() then
    return false
  end
  local ticket = redis.call('ZSCORE', KEYS[4], member)
  if not ticket then
    return false
  end
  redis.call('ZREM', KEYS[4], member)
  local deadline = redis.call('ZSCORE', KEYS[5], member)
  redis.call('ZREM', KEYS[5], member)
  if left and deadline then
    redis.call('ZADD', KEYS[5], deadline, '!' .. ticket)
  end
  expire_queue()
  return true
end

-- Did the member leave the queue while this request was open? True when
-- the request sent the ticket an earlier try of it was given, the member
-- has no entry with that ticket now, and a DELETE of the holder removed
-- it (its mark '!<ticket>' is there: see leave_queue). An entry lost
-- otherwise (Redis restarted empty) is taken again. Such a request takes
-- no place again and is granted nothing: every acquire asks this before
-- a free object would admit the member, and waiting answers it as a try
-- (ticket 0), which ends its wait at once with "not acquired".
local function left_while_open(member)
  if not SENT_TICKET or tonumber(redis.call('ZSCORE', KEYS[4], member)) == SENT_TICKET then
    return false
  end
  return redis.call('ZSCORE', KEYS[5], '!' .. SENT_TICKET) ~= false
end

-- A waiter's reply hint: `pttl` capped at half the grace, so that a client
-- following it polls again in time to keep its place.
local function hint(pttl)
  local cap = math.floor(tonumber(ARGV[3]) / 2)
  if pttl < 0 or pttl > cap then
    return cap
  end
  return pttl
end

-- The member at the head of the queue; nil when nobody is queued.
local function queue_head()
  if queue_absent() then
    return nil
  end
  return redis.call('ZRANGE', KEYS[4], 0, 0)[1]
end

-- The ms until the head of the queue loses its place (its grace runs out);
-- nil when nobody is queued.
local function head_lapses()
  local head = queue_head()
  if not head then
    return nil
  end
  return tonumber(redis.call('ZSCORE', KEYS[5], head)) - now
end

-- The reply to a member that must wait, blocked by holds that end in
-- pttl ms (0: only by the queue; free says the waiters ahead may be what
-- blocks it: nothing is held, or on a semaphore some permits are free):
-- {0, retry_after_ms, position, ticket, recheck_ms}.
--
-- A long-poll keeps (or takes, at the tail) its place; a try (ARGV[4] '')
-- takes none: nothing is recorded for it, its ticket is 0, and its
-- position counts the waiters ahead of it (all of them, unless an earlier
-- long-poll of the same member left it a place). A long-poll whose member
-- left the queue while it was open (left_while_open) is answered like a
-- try: ticket 0, which ends its wait.
--
-- retry_after_ms is the hint for clients (see hint), 0 only when a retry
-- may succeed at once: the blocker's remaining lease; while free, the time
-- until the waiter at the head loses its place (sooner if a lease ends
-- first), since a waiter that stopped polling keeps it until then.
-- recheck_ms is when this waiter should look again by itself (0: only
-- when woken): the head when the blocker's lease ends, the second in line
-- when a free lock's head would lose its place.
local function waiting(member, pttl, free)
  local ticket = 0
  if WAIT_LEFT ~= '' and not left_while_open(member) then
    ticket = enter(member)
  end
  local position = redis.call('ZRANK', KEYS[4], member) or redis.call('ZCARD', KEYS[4])
  local blocked_for = pttl
  local lapse = head_lapses()
  if free and position > 0 and lapse and (blocked_for <= 0 or lapse < blocked_for) then
    blocked_for = lapse
  end
  local retry = hint(blocked_for)
  local recheck = 0
  if ticket > 0 and position == 0 then
    recheck = retry
  elseif ticket > 0 and position == 1 and free then
    recheck = lapse + 1
  end
  return {0, retry, position, ticket, recheck}
end

-- How many waiters are queued (every instance's), leaving out entries
-- whose deadline passed but that no script has pruned yet. Read-only.
local function queue_length()
  local lapsed = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)) do
    if string.sub(m, 1, 1) ~= '!' then
      lapsed = lapsed + 1
    end
  end
  return math.max(redis.call('ZCARD', KEYS[4]) - lapsed, 0)
end
