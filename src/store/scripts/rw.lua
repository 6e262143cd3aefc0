-- rw: the state of a read-write lock and what every rwlock script shares
-- (joined after queue.lua, whose queue holds the waiters: members are
-- 'r|<holder>' and 'w|<holder>').
--
-- The common arguments, the same in every rwlock script:
-- ARGV[1]  wake channel {prefix}{name}:rw:wake
-- ARGV[2]  holder id ('' where the script has none)
-- ARGV[3]  queue grace in ms
-- ARGV[4]  time the request may still wait, in ms ('' where none)
--
-- KEYS[1]  hash {prefix}{name}:rw
--          w, wc, wt, wl, wd   the writer: holder id, hold count, fencing
--                              token, lease (ms), deadline (ms, Redis clock)
--          r|<h>, rt|<h>, rl|<h>  a reader's hold count, token and lease
--          a|<attempt>         '<r|w><level>': the hold that attempt made
--          i|<r|w>|<h>|<level> the attempt that made that hold (the index
--                              that lets a release forget it without a scan)
--          ss|<h>, sv|<h>, se|<h>  a holder's holds taken in a session
--                              (hold_session.lua, joined before this file)
--          ow, tw              the write hold's owner label and grant
--                              time (holds.lua: suffix 'w')
--          or|<h>, tr|<h>      a reader's (suffix 'r|<h>')
--          soonest             the readers' reclaim floor (leases.lua)
-- KEYS[2]  fence {prefix}{name}:rw:fence (counter; never expires)
-- KEYS[3]  the attempt's marker (acquire, undo), else the hash again
-- KEYS[4..6]  the queue (queue.lua)
-- KEYS[7]  readers zset {prefix}{name}:rw:readers  holder → its deadline
--
-- Every reader's lease is its own (its deadline in KEYS[7]); the write
-- hold's is wd. Expired holds are dropped by every script before it reads,
-- on Redis's clock. The hash and the readers live at least as long as the
-- last hold, and go when nothing is held.

local function index_key(mode, holder, level)
  return 'i|' .. mode .. '|' .. holder .. '|' .. level
end

-- Calls `command` ('HMGET' or 'HDEL') on the hash with the list `fields`
-- as its arguments, at most 1000 at a time (unpack's limit); returns the
-- replies joined. Each command is named literally, so that every command
-- a script calls can be read from its text (the documented ACL is checked
-- against it).
local function on_fields(command, fields)
  local replies = {}
  for i = 1, #fields, 1000 do
    local last = math.min(i + 999, #fields)
    local reply
    if command == 'HMGET' then
      reply = redis.call('HMGET', KEYS[1], unpack(fields, i, last))
    else
      reply = redis.call('HDEL', KEYS[1], unpack(fields, i, last))
    end
    if type(reply) == 'table' then
      for _, r in ipairs(reply) do
        replies[#replies + 1] = r
      end
    end
  end
  return replies
end

-- The fields that record the attempts that made levels from..to of a
-- holder's holds (for an HDEL), read with HMGET.
local function attempt_fields(mode, holder, from, to)
  local keys, fields = {}, {}
  for level = from, to do
    keys[#keys + 1] = index_key(mode, holder, level)
  end
  local ids = on_fields('HMGET', keys)
  for i, key in ipairs(keys) do
    if ids[i] then
      fields[#fields + 1] = 'a|' .. ids[i]
      fields[#fields + 1] = key
    end
  end
  return fields
end

-- Forgets the attempts that made levels from..to of a holder's holds.
local function forget(mode, holder, from, to)
  on_fields('HDEL', attempt_fields(mode, holder, from, to))
end

-- Appends the holder's session fields to `fields` (an HDEL's): it holds
-- nothing any more.
local function with_session(fields, holder)
  for _, f in ipairs({session_fields(holder)}) do
    fields[#fields + 1] = f
  end
end

-- The suffix of the owner fields (holds.lua) of a holder's hold in `mode`.
local function owner_suffix(mode, holder)
  if mode == 'w' then
    return 'w'
  end
  return 'r|' .. holder
end

-- Drops the write hold, with its attempts' fields, or with `fields`
-- instead when given (the caller collected them: attempt_fields), and its
-- session's when the writer holds no read hold either. All in one HDEL.
local function drop_writer(fields)
  local holder = redis.call('HGET', KEYS[1], 'w')
  fields = fields or attempt_fields('w', holder, 1, tonumber(redis.call('HGET', KEYS[1], 'wc')))
  for _, f in ipairs({'w', 'wc', 'wt', 'wl', 'wd', 'ow', 'tw'}) do
    fields[#fields + 1] = f
  end
  if redis.call('HEXISTS', KEYS[1], 'r|' .. holder) == 0 then
    with_session(fields, holder)
  end
  on_fields('HDEL', fields)
end

-- Drops a reader's hold, with its attempts' fields (or `fields`, as in
-- drop_writer), and its session's when it does not hold the write hold
-- (`writer`: the writer, false for none, when the caller has read it).
local function drop_reader(holder, fields, writer)
  fields = fields or attempt_fields('r', holder, 1,
    tonumber(redis.call('HGET', KEYS[1], 'r|' .. holder) or '0'))
  for _, f in ipairs({'r|' .. holder, 'rt|' .. holder, 'rl|' .. holder, 'or|' .. holder,
    'tr|' .. holder}) do
    fields[#fields + 1] = f
  end
  if writer == nil then
    writer = redis.call('HGET', KEYS[1], 'w')
  end
  if writer ~= holder then
    with_session(fields, holder)
  end
  on_fields('HDEL', fields)
  redis.call('ZREM', KEYS[7], holder)
end

-- Drops the holds whose lease ended; true if any did. `wd` is the write
-- hold's deadline and `soonest` the readers' reclaim floor (leases.lua)
-- when the caller has read them (false for none); with neither, both are
-- read here.
local function drop_expired(wd, soonest)
  local dropped = false
  if wd == nil then
    local f = redis.call('HMGET', KEYS[1], 'wd', 'soonest')
    wd, soonest = f[1], f[2]
  end
  if wd and wd + 0 <= now then
    drop_writer()
    dropped = true
  end
  local gone = ended_leases(KEYS[1], KEYS[7], soonest)
  if gone and gone[1] then
    for _, holder in ipairs(gone) do
      drop_reader(holder)
    end
    dropped = true
  end
  return dropped
end

-- Remaining ms of the longest hold (0 when free). `wd` is the write
-- hold's deadline (0 for none) and `reader` the end of the last read hold
-- (0 for none) when the caller knows them.
local function held_for(wd, reader)
  local last = wd or tonumber(redis.call('HGET', KEYS[1], 'wd') or '0')
  if not reader then
    local r = redis.call('ZRANGE', KEYS[7], -1, -1, 'WITHSCORES')
    reader = tonumber(r[2] or '0')
  end
  return math.max(math.max(last, reader) - now, 0)
end

-- The hash and the readers live exactly as long as the last hold (`wd`
-- and `reader` as in held_for). Returns true when nothing is held (both
-- are deleted). A caller that knows a lease that may be that TTL passes
-- it (`lease`) with its text, written in its place when it is (time_text
-- in holds.lua).
local function expire_holds(wd, reader, lease, lease_text)
  local ttl = held_for(wd, reader)
  if ttl > 0 then
    if ttl == lease then
      ttl = lease_text
    end
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[7], ttl)
    return false
  end
  redis.call('DEL', KEYS[1], KEYS[7])
  return true
end

-- Publishes the queue and lets go whoever can be granted now: when the
-- head waits to write, the head alone and only once nothing is held; when
-- it waits to read, every reader queued before the first writer (unless a
-- writer holds the lock).
local function wake()
  if queue_absent() then
    return
  end
  local members, tickets = first_entries()
  local limit = 0
  if tickets[1] and not redis.call('HGET', KEYS[1], 'w') then
    if string.sub(members[1], 1, 1) == 'w' then
      if redis.call('ZCARD', KEYS[7]) == 0 then
        limit = tonumber(tickets[1])
      end
    else
      limit = tonumber(tickets[#tickets])
      for i, member in ipairs(members) do
        if string.sub(member, 1, 1) == 'w' then
          limit = tonumber(tickets[i]) - 1
          break
        end
      end
    end
  end
  announce(members, tickets, limit)
end

-- A holder's hold in `mode` ended (released or given back): drop it and
-- wake the queue. When nothing is held any more the hash and the readers
-- go whole; while something is, their TTL already outlasts every hold
-- (each acquire and renewal sets it to the end of the last one), so it is
-- left as it is. What the caller knows, when given: `fields`, its
-- attempts' fields (drop_writer); `writer`, the writer (false for none);
-- `held`, true when something stays held. Returns true when nothing is
-- held any more.
local function hold_ended(mode, holder, fields, writer, held)
  if mode == 'w' then
    drop_writer(fields)
    writer = false
  else
    drop_reader(holder, fields, writer)
    if writer == nil then
      writer = redis.call('HGET', KEYS[1], 'w')
    end
  end
  local free = not held and not writer and redis.call('ZCARD', KEYS[7]) == 0
  if free then
    redis.call('DEL', KEYS[1], KEYS[7])
  end
  wake()
  return free
end

-- {1, token, hold_count, lease_ms, mode, read_hold_count, write_hold_count}
-- for the holder's hold in `mode`.
local function grant_reply(mode, holder)
  local h = redis.call('HMGET', KEYS[1], 'w', 'wc', 'wt', 'wl',
    'r|' .. holder, 'rt|' .. holder, 'rl|' .. holder)
  local wc = 0
  if h[1] == holder then
    wc = tonumber(h[2])
  end
  local rc = tonumber(h[5] or '0')
  if mode == 'w' then
    return {1, tonumber(h[3]), wc, tonumber(h[4]), 'w', rc, wc}
  end
  return {1, tonumber(h[6]), rc, tonumber(h[7]), 'r', rc, wc}
end

-- Sessions (the book's "Sessions" (docs/src/sessions.md); hold_session.lua).

-- When the holder's hold in `mode` ends (ms, Redis clock), or nil.
local function ends(mode, holder)
  if mode == 'w' then
    if redis.call('HGET', KEYS[1], 'w') == holder then
      return tonumber(redis.call('HGET', KEYS[1], 'wd'))
    end
    return nil
  end
  local d = redis.call('ZSCORE', KEYS[7], holder)
  return d and tonumber(d)
end

-- Moves the end of every hold of the holder to now + its lease (`lease`
-- when given, which becomes the hold's lease; else the one it has), never
-- past `cap` (ms, Redis clock; nil: none). Wakes the queue when a hold
-- now ends earlier than it did, so that the waiters look again by then.
-- The caller expires the holds (expire_holds) afterwards.
local function extend(holder, lease, cap)
  local shortened = false
  for _, mode in ipairs({'w', 'r'}) do
    local before = ends(mode, holder)
    if before then
      local field = (mode == 'w') and 'wl' or ('rl|' .. holder)
      local l = lease or tonumber(redis.call('HGET', KEYS[1], field))
      local deadline = now + l
      if cap then
        deadline = math.max(math.min(deadline, cap), now + 1)
      end
      redis.call('HSET', KEYS[1], field, l)
      if mode == 'w' then
        redis.call('HSET', KEYS[1], 'wd', deadline)
      else
        redis.call('ZADD', KEYS[7], deadline, holder)
        lower_floor(KEYS[1], deadline)
      end
      shortened = shortened or deadline < before
    end
  end
  if shortened then
    wake()
  end
end

-- Who holds it (the book's "Who holds it" (docs/src/who-holds-it.md);
-- holds.lua).

-- The owners of the live holds that block `holder` from a hold in `mode`
-- (at most 10; '' for a hold without one): for a write, every other
-- holder's holds; for a read, the write hold.
local function blocking_owners(mode, holder)
  local owners = {}
  local writer = redis.call('HGET', KEYS[1], 'w')
  if writer and writer ~= holder then
    owners[1] = redis.call('HGET', KEYS[1], 'ow') or ''
  end
  if mode == 'w' then
    for _, r in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '(' .. now, '+inf', 'LIMIT', 0, 11)) do
      if r ~= holder and #owners < 10 then
        owners[#owners + 1] = redis.call('HGET', KEYS[1], 'or|' .. r) or ''
      end
    end
  end
  return owners
end

-- The live holds as a state read reports them (holds.lua's hold_entry),
-- the write hold first, then at most `limit` - 1 readers by their end.
local function hold_entries(limit)
  local entries = {}
  local h = redis.call('HMGET', KEYS[1], 'w', 'wc', 'wd', 'ow', 'tw')
  if h[1] and tonumber(h[3]) > now then
    entries[1] = hold_entry(h[4], tonumber(h[3]) - now, h[5], session_of(KEYS[1], h[1]), h[2], 'write')
  end
  local readers = redis.call('ZRANGEBYSCORE', KEYS[7], '(' .. now, '+inf', 'WITHSCORES',
    'LIMIT', 0, limit - #entries)
  for i = 1, #readers, 2 do
    local r = readers[i]
    local f = redis.call('HMGET', KEYS[1], 'r|' .. r, 'or|' .. r, 'tr|' .. r)
    entries[#entries + 1] = hold_entry(f[2], tonumber(readers[i + 1]) - now, f[3],
      session_of(KEYS[1], r), f[1], 'read')
  end
  return entries
end
