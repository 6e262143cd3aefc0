-- rw_acquire: take (or re-enter) a read or write hold, or queue for it.
-- Runs after queue.lua and rw.lua (keys and common arguments there).
--
-- ARGV[5]  'r' or 'w'
-- ARGV[6]  lease in milliseconds (in a session: the session's end, ms on
--          Redis's clock; the lease is what is left of it, 1 ms when
--          nothing is: the session is gone, and so is the hold by then)
-- ARGV[7]  attempt id (unique per try)
-- ARGV[8]  the session the hold is taken in, or '' for none
-- ARGV[9]  the version of the session's state that end comes from, or ''
--          for none
-- ARGV[10] the owner label ('' for none; holds.lua): a new hold without
--          one takes the label of the holder's hold in the other mode
--
-- Returns  {1, token, hold_count, lease_ms, mode, read_count, write_count}
--                   granted (a repeat of the attempt returns its grant)
--          {0, retry_after_ms, position, ticket, recheck_ms, held_by}
--                   must wait; held_by: the owners of the holds that block
--                   it (blocking_owners)
--          {-1}     this attempt was already given up: nothing granted
--          {-2}     a write asked by one of several readers: it would wait
--                   for itself (upgrade-would-deadlock), refused at once
--          {-5}     the holder holds the rwlock in another session, or in
--                   none (or the reverse): session-mismatch, nothing changed
--
-- Policy (arrival order between readers and writers):
-- - a holder that already holds re-enters: a reader reads again, a writer
--   reads or writes again (downgrade), the only reader may write (upgrade);
-- - otherwise a reader waits while a writer holds the lock or a writer is
--   queued ahead of it, and a writer waits while anyone holds the lock or
--   anyone is queued ahead of it. So once a writer waits, later readers
--   wait behind it (no writer starvation), and readers queued before a
--   writer go before it (no reader starvation).
-- Tokens: every new hold (not a re-entry) takes the next fence value, so
-- tokens strictly increase across both modes.
-- Sessions: a holder's holds are all in one session or none. A hold taken
-- in a session is a renewal of the holder's holds by it: unless they have
-- applied a newer version of the session's state (then the new hold ends
-- when that says), every hold of the holder ends after the lease.
local holder, mode, lease, id = ARGV[2], ARGV[5], ARGV[6] + 0, ARGV[7]
-- What the acquire reads of the hash, in one HMGET: whether the attempt
-- made a hold already, the writer and its deadline, the holder's read
-- holds and session, the tokens and write count a grant replies,
-- whether the hash is kept as a hash table already (keep_as_table in
-- holds.lua), and the readers' reclaim floor (leases.lua).
local function read_hold()
  return redis.call('HMGET', KEYS[1], 'a|' .. id, 'wd', 'w', 'r|' .. holder, 'ss|' .. holder,
    'wc', 'wt', 'rt|' .. holder, 'table', 'soonest')
end
local h = read_hold()
-- Was this attempt given up (its marker)? Where the hash has no reclaim
-- floor (a free rwlock's, which this acquire creates: the common case),
-- the same EXISTS asks whether there are readers at all; with none, no
-- lease is scanned for (leases.lua).
local given_up, none = exists_besides_queue(KEYS[3], (not h[10]) and KEYS[7] or nil)
if given_up then
  return {-1}
end
LEASES_ABSENT = none and not h[10]
if h[1] then
  return grant_reply(string.sub(h[1], 1, 1), holder)
end
if refresh(h[2], h[10]) then
  h = read_hold()
end
local member = mode .. '|' .. holder
local writer = h[3]
local reads = (h[4] or 0) + 0
-- How many hold the read lock (read before any write of this script).
local function readers()
  return redis.call('ZCARD', KEYS[7])
end
local session, version = ARGV[8] or '', ARGV[9]
if session ~= '' then
  lease = math.max(lease - now, 1)
end
if (writer == holder or reads > 0) and (h[5] or '') ~= session then
  return {-5}
end
-- A session's state the holder's holds have not applied yet (or none).
local fresh = session == '' or newer(KEYS[1], holder, version)

-- Set when the queue was seen empty: the member has no entry to leave.
local unqueued = false

-- Is anyone queued ahead of the member (only writers, with writers_only)?
-- The head alone answers when nobody is queued, when the member is the
-- head, or when the head is someone else who counts.
local function queued_ahead(writers_only)
  local head = queue_head()
  if not head then
    unqueued = true
    return false
  end
  if head == member then
    return false
  end
  if not writers_only or string.sub(head, 1, 1) == 'w' then
    return true
  end
  local rank = redis.call('ZRANK', KEYS[4], member)
  local ahead
  if rank then
    if rank == 0 then
      return false
    end
    ahead = redis.call('ZRANGE', KEYS[4], 0, rank - 1)
  else
    ahead = redis.call('ZRANGE', KEYS[4], 0, -1)
  end
  if not writers_only then
    return #ahead > 0
  end
  for _, m in ipairs(ahead) do
    if string.sub(m, 1, 1) == 'w' then
      return true
    end
  end
  return false
end

local function take()
  local count_field, token_field, count, token
  if mode == 'w' then
    count_field, token_field, count, token = 'wc', 'wt', h[6], h[7]
  else
    count_field, token_field, count, token = 'r|' .. holder, 'rt|' .. holder, h[4], h[8]
  end
  count = (count or 0) + 1
  -- Everything the hold changes in the hash, in one HSET. A first hold's
  -- count and a lease that is not a session's are written as text
  -- (time_text in holds.lua).
  local count_text = count == 1 and '1' or count
  local lease_text = session == '' and ARGV[6] or lease
  -- (The trailing nils make room for the fields added below, which the
  -- list then grows into without being moved.)
  local fields = {count_field, count_text, 'a|' .. id, mode .. count_text,
    index_key(mode, holder, count_text), id,
    nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
  if count == 1 then
    token = redis.call('INCR', KEYS[2])
    fields[#fields + 1] = token_field
    fields[#fields + 1] = token
  end
  local deadline = now + lease
  if not fresh then
    deadline = session_end(KEYS[1], holder)
  end
  if mode == 'w' then
    fields[#fields + 1] = 'w'
    fields[#fields + 1] = holder
    fields[#fields + 1] = 'wl'
    fields[#fields + 1] = lease_text
    fields[#fields + 1] = 'wd'
    fields[#fields + 1] = deadline
  else
    fields[#fields + 1] = 'rl|' .. holder
    fields[#fields + 1] = lease_text
    redis.call('ZADD', KEYS[7], deadline, holder)
  end
  local owner = ARGV[10] or ''
  if (owner == '' or lent_owner(owner)) and count == 1 then
    local other = (mode == 'w') and 'or|' .. holder or 'ow'
    if mode == 'w' or writer == holder then
      owner = redis.call('HGET', KEYS[1], other) or owner
    end
  end
  owner_fields(fields, owner_suffix(mode, holder), owner, count == 1 and time_text(clock) or nil)
  floor_field(KEYS[1], fields, mode == 'r' and deadline or nil)
  redis.call('HSET', KEYS[1], unpack(fields))
  -- Nothing was held before this hold (no writer, and the refresh found
  -- no reader's lease): the hash holds this hold's fields alone, and the
  -- last read hold, if any, is this one.
  local alone = NO_LEASE and not writer
  if count == 1 and not h[9] and not alone then
    keep_as_table(KEYS[1])
  end
  if session ~= '' and fresh then
    in_session(KEYS[1], holder, session, version, lease)
    extend(holder, lease, nil)
  end
  if session ~= '' then
    -- The session may have moved the holds' ends (extend): read them.
    expire_holds()
  elseif mode == 'w' then
    expire_holds(deadline, NO_LEASE and 0 or nil, lease, lease_text)
  else
    expire_holds((h[2] or 0) + 0, NO_LEASE and deadline or nil, lease, lease_text)
  end
  if not unqueued and leave_queue(member) then
    wake()
  end
  if session ~= '' then
    return grant_reply(mode, holder)
  end
  -- What grant_reply would read: the values just written.
  local wc = (writer == holder) and tonumber(h[6] or '0') or 0
  if mode == 'w' then
    return {1, tonumber(token), count, lease, 'w', reads, count}
  end
  return {1, tonumber(token), count, lease, 'r', count, wc}
end

-- The reply to a request that must wait (queue.lua's waiting), with the
-- owners of the holds that block it.
local function blocked(pttl, free)
  local reply = waiting(member, pttl, free)
  reply[#reply + 1] = blocking_owners(mode, holder)
  return reply
end

-- A waiter that left the queue while this request was open (queue.lua)
-- is granted nothing, unless it re-enters a hold it has.
if writer ~= holder and reads == 0 and left_while_open(member) then
  return blocked(held_for(), false)
end

if mode == 'r' then
  if writer == holder or reads > 0 then
    return take()
  end
  if writer then
    return blocked(held_for(), false)
  end
  if queued_ahead(true) then
    return blocked(held_for(), readers() == 0)
  end
  return take()
end
if writer == holder then
  return take()
end
if reads > 0 then
  if not writer and readers() == 1 then
    return take()
  end
  return {-2}
end
if writer or readers() > 0 then
  return blocked(held_for(), false)
end
if queued_ahead(false) then
  return blocked(0, true)
end
return take()
