-- holds: owner labels and grant times of holds, and how a state read
-- reports one hold; joined before the scripts that record or show them
-- (the book's "Who holds it" (docs/src/who-holds-it.md)).
--
-- Storage convention, the same for every primitive: a hold records its
-- owner label (field `o`, or `o|<holder>` where one hash keeps several
-- holders' holds; absent when the acquire sent none) and its grant time
-- (field `t`, or `t|<holder>`: ms on Redis's clock, set when the hold is
-- first granted). A re-entry keeps `t`; a re-entry that sends an owner
-- replaces the label, one that sends none ('') keeps it. Each acquire
-- script takes the owner as one more ARGV ('' for none). Labels are not
-- secrets, and never holder ids or session ids.
--
-- A state read reports each hold (at most 100) as
--   {owner ('' for none), expires_in_ms, held_for_ms, in_session (0|1),
--    count (hold count, or permits), mode ('', 'read' or 'write')}

-- A hash that keeps many holders' holds (a semaphore's holds, a read-write
-- lock's hash) is kept as a hash table. Redis keeps a small hash as one
-- flat list (a listpack), where each field a script reads or writes is a
-- scan of the list: with 32 holders a semaphore's holds have about 225
-- fields, and those scans were half of what its scripts cost Redis (the
-- book's benchmark chapter, round 3). A hash turns into a table for good
-- once one of its values is longer than `hash-max-listpack-value` (64
-- bytes by default), so a hash past MANY_FIELDS fields gets one such value
-- in a field no hold uses. It goes with the hash, which is deleted or
-- expires with the last hold; nothing reads it.
local MANY_FIELDS = 32
local function keep_as_table(hash)
  if redis.call('HLEN', hash) > MANY_FIELDS then
    redis.call('HSET', hash, 'table', string.rep('-', 200))
  end
end

-- Redis's clock in ms.
local function holds_now()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- A reply of TIME ({seconds, microseconds}, both text) as ms, as text:
-- what a script stores as a grant time. Redis 7.0 formats each number a
-- script passes to redis.call with "%.17g" (about 2 000 instructions a
-- number, measured: the book's benchmark chapter, "Text where the
-- scripts have it"), where it copies a string; the scripts pass the text
-- they have (an argument, a value they read) wherever it is the value to
-- write.
local function time_text(t)
  return t[1] .. string.sub('00000' .. t[2], -6, -4)
end

-- An owner argument that starts with LENT (\1: a label never holds a
-- control character) is the label of the session the hold is taken in,
-- lent because the acquire sent none: it labels a new hold only, and a
-- re-entry keeps the label the hold has. Returns that label, or nil.
local LENT = '\1'
local function lent_owner(owner)
  if owner and owner ~= '' and string.sub(owner, 1, 1) == LENT then
    return string.sub(owner, 2)
  end
  return nil
end

-- The label to write for `owner` ('' or nil: keep the label there is; a
-- lent label is written only on a new hold), or nil.
local function label_to_write(owner, new)
  local lent = lent_owner(owner)
  if lent then
    owner = new and lent or ''
  end
  if owner ~= nil and owner ~= '' then
    return owner
  end
  return nil
end

-- Appends to `fields` (field, value, field, value, ... for one HSET) the
-- owner label `owner` ('' keeps the label there is) and, for a hold
-- granted now, its grant time `granted_at` (ms, as time_text gives it;
-- nil for a hold that is not new), under the fields `o<suffix>` and
-- `t<suffix>` (suffix '' or '|<holder>'). A script that writes the
-- hold's other fields anyway writes these in the same HSET.
local function owner_fields(fields, suffix, owner, granted_at)
  if granted_at then
    fields[#fields + 1] = 't' .. suffix
    fields[#fields + 1] = granted_at
  end
  local label = label_to_write(owner, granted_at ~= nil)
  if label then
    fields[#fields + 1] = 'o' .. suffix
    fields[#fields + 1] = label
  end
end

-- Records the owner label `owner` ('' keeps the label there is) of a hold
-- granted now (`new`) or re-entered, in `hash`, as owner_fields says but
-- without building a list: the plain lock's acquire is the cheapest
-- script there is. A new hold's grant time (`t<suffix>`, time_text) is
-- the caller's to write, in the HSET of the hold's fields.
local function record_owner(hash, suffix, owner, new)
  local label = label_to_write(owner, new)
  if label then
    redis.call('HSET', hash, 'o' .. suffix, label)
  end
end

-- One hold as a state read reports it: `owner` (nil or ''), its remaining
-- lease `pttl` (ms), its grant time `granted` (ms, nil when unknown: a
-- hold older than owner labels counts from now), whether it is in a
-- session, its count, and its mode (nil for none).
local function hold_entry(owner, pttl, granted, session, count, mode)
  local now = holds_now()
  local held_for = 0
  if granted then
    held_for = math.max(now - tonumber(granted), 0)
  end
  local in_session = 0
  if session and session ~= '' then
    in_session = 1
  end
  return {owner or '', math.max(tonumber(pttl), 0), held_for, in_session,
    tonumber(count) or 0, mode or ''}
end
