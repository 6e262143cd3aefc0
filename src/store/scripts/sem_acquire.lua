-- sem_acquire: take k permits under a holder's lease (adding to what the
-- holder already has), or queue for them.
-- Runs after queue.lua and sem.lua (keys and common arguments there).
--
-- ARGV[5]  permits wanted (k ≥ 1)
-- ARGV[6]  lease in milliseconds (the whole hold's lease from now on; in a
--          session: the session's end, ms on Redis's clock, and the lease
--          what is left of it, 1 ms when nothing is: the session is gone,
--          and so is the hold by then)
-- ARGV[7]  attempt id (unique per try)
-- ARGV[8]  the session the hold is taken in, or '' for none
-- ARGV[9]  the version of the session's state that end comes from, or ''
--          for none
-- ARGV[10] the owner label ('' for none; holds.lua)
--
-- Returns  {1, token, permits, lease_ms, grants}  granted: the holder's
--                   total permits (a repeat of the attempt returns it again)
--          {0, retry_after_ms, position, ticket, recheck_ms, available,
--           held_by}  must wait; held_by: the owners of the holds of
--                   permits (blocking_owners)
--          {-1}     this attempt was already given up: nothing granted
--          {-3, permits}  k is more than the semaphore has: never grantable
--          {-4}     the semaphore is not configured (or was deleted)
--          {-5}     the holder holds permits in another session, or in
--                   none (or the reverse): session-mismatch, nothing changed
--
-- Policy (see walk in sem.lua): arrival order, and a request that fits
-- may overtake waiters that do not, at most OVERTAKES times per head.
-- Tokens: a holder's first grant takes the next fence value; later grants
-- to the same holder keep it (like a re-entry).
-- Sessions: a grant in a session is a renewal of the hold by it, unless
-- the hold has applied a newer version of the session's state (then it
-- keeps the end that says).
if exists_besides_queue(KEYS[3]) then
  return {-1}
end
local holder, need, lease, id = ARGV[2], ARGV[5] + 0, ARGV[6] + 0, ARGV[7]
-- The holder's fields this script reads and writes, named once.
local attempt_f, lease_f, count_f, permits_f, token_f, attempts_f = 'a|' .. id, 'l|' .. holder,
  'c|' .. holder, 'p|' .. holder, 't|' .. holder, 'as|' .. holder
-- What this script reads of the holds: whether the attempt was granted,
-- the holder's lease, the permits in use and the reclaim floor, then,
-- only when the holder has a lease, its hold so far (without one it has
-- none: its first grant, which takes a token). Each field looked up costs
-- a scan of the hash while it is a listpack, with many holders. As one
-- list: {a|<attempt>, l|<h>, ss|<h>, c|<h>, p|<h>, t|<h>, as|<h>, used,
-- table, soonest, kept} (table: the hash is kept as a hash table already;
-- keep_as_table in holds.lua). The holder's field names are arguments:
-- as upvalues of the library's function they would pass Lua's limit of
-- 60 (MAX_UPVALUES in src/store/scripts/library.rs).
local function read_holds(a, l, c, p, t, as)
  local h = redis.call('HMGET', KEYS[7], a, l, 'used', 'table', 'soonest', 'kept')
  if not h[2] then
    return {h[1], false, false, false, false, false, false, h[3], h[4], h[5], h[6]}
  end
  local hold = redis.call('HMGET', KEYS[7], 'ss|' .. holder, c, p, t, as)
  return {h[1], h[2], hold[1], hold[2], hold[3], hold[4], hold[5], h[3], h[4], h[5], h[6]}
end
local h = read_holds(attempt_f, lease_f, count_f, permits_f, token_f, attempts_f)
if h[1] then
  return grant_reply(holder)
end
local permits = configured_permits()
if permits == 0 then
  return {-4}
end
if need > permits then
  return {-3, permits}
end
if refresh(h[10], h[8]) then
  -- Expired holds were reclaimed: the holder's among them, maybe.
  h = read_holds(attempt_f, lease_f, count_f, permits_f, token_f, attempts_f)
end
local session, version = ARGV[8] or '', ARGV[9]
if session ~= '' then
  lease = math.max(lease - now, 1)
end
if h[2] and (h[3] or '') ~= session then
  return {-5}
end
local member = ARGV[5] .. '|' .. holder
-- A waiter that left the queue while this request was open (queue.lua)
-- is granted nothing.
local go, overtakes, unqueued = false, false, false
if not left_while_open(member) then
  local _
  _, _, go, overtakes, unqueued = walk(member, need, math.max(permits - (h[8] or 0), 0))
end
if not go then
  local free = available()
  local reply = waiting(member, first_lease_ends(), free > 0)
  reply[#reply + 1] = free
  reply[#reply + 1] = blocking_owners(holder)
  return reply
end
if overtakes then
  overtaken()
end
-- The hold is written back in one HSET, with the reclaim floor. A first
-- grant's count and permits and a lease that is not a session's are
-- written as the text they came as (time_text in holds.lua).
local grants = (h[4] or 0) + 1
local first = grants == 1
local held = (h[5] or 0) + need
local token = h[6]
if first then
  token = redis.call('INCR', KEYS[2])
end
-- The hold's new end: now + the lease, unless a session's state newer
-- than this grant's was applied (the hold keeps the end that says).
local renewed = session ~= '' and newer(KEYS[7], holder, version)
local deadline = nil
if session == '' or renewed then
  deadline = now + lease
end
local attempts = h[7] and (h[7] .. ' ' .. id) or id
local lease_text = session == '' and ARGV[6] or lease
-- A first grant's lease must end before the keys do. Keys that were
-- there (permits are held, so both exist) and live past it already
-- (`kept`) are left as they are: a semaphore in steady use pays no
-- PEXPIRE per grant. Keys that were there but end sooner live a lease
-- past this one from now on, and `kept` says so; keys this grant creates
-- live as long as its lease (the last hold's release deletes them).
local extend, kept = deadline and first, nil
if extend and (h[8] or 0) + 0 > 0 then
  if h[11] and h[11] + 0 >= deadline then
    extend = false
  else
    kept = deadline + lease
  end
end
-- (The trailing nils make room for the grant time, the label, the floor
-- and `kept`, which the list then grows into without being moved.)
local fields = {count_f, first and '1' or grants, permits_f, h[5] and held or ARGV[5],
  token_f, token, lease_f, lease_text, attempt_f, ARGV[5],
  attempts_f, attempts, 'used', (h[8] or 0) + need, nil, nil, nil, nil, nil, nil, nil, nil}
owner_fields(fields, 'h|' .. holder, ARGV[10] or '', first and time_text(clock) or nil)
floor_field(KEYS[7], fields, deadline)
if kept then
  fields[#fields + 1] = 'kept'
  fields[#fields + 1] = kept
end
redis.call('HSET', KEYS[7], unpack(fields))
-- (Holds that were not there, no `used`, hold this hold's fields alone.)
if first and not h[9] and h[8] then
  keep_as_table(KEYS[7])
end
if renewed then
  in_session(KEYS[7], holder, session, version, lease)
end
if deadline and first then
  -- A first grant has no lease yet that could end earlier (set_deadline);
  -- holds that were not there (no `used`) are keys this call created.
  redis.call('ZADD', KEYS[8], deadline, holder)
  if kept then
    extend_holds(kept, false)
  elseif extend then
    -- (The keys' TTL from now is the lease, as text.)
    extend_holds(deadline, not h[8], lease_text)
  end
elseif deadline then
  set_deadline(holder, deadline, lease_text)
end
-- Nobody was queued (walk): the member has no entry to leave.
if not unqueued and leave_queue(member) then
  wake()
end
return {1, tonumber(token), held, lease, grants}
