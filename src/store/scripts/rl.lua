-- rl: what every rate-limiter script shares (joined first).
--
-- KEYS[1]  the limiter {prefix}{name}:rl, a hash kept until deleted:
--            rate, per_ms, burst  the configuration
--            tat    the theoretical arrival time (GCRA), whole µs on
--                   Redis's clock ...
--            frac   ... plus this many ticks of 1/rate µs (0 <= frac < rate)
--            gen    the incarnation: Redis's clock in µs when it was
--                   created (a waiter's reservation belongs to one)
--            last   the attempt id of the acquire that moved tat last,
--                   until it is given back or the limiter reconfigured
--
-- GCRA: a permit costs T = per_ms * 1000 / rate µs of emission time. A
-- request for k permits at `now` is admitted when
--   max(tat, now) + k*T - now <= burst*T,
-- and then tat becomes max(tat, now) + k*T. So over any window of length
-- t, at most burst + rate * t / per_ms permits are admitted, whatever the
-- request sizes, and the state is these few fields whatever the rate.
--
-- Exactness: T is rarely a whole number of µs, so spans of time are pairs
-- {µs, ticks} with 0 <= ticks < rate (a tick is 1/rate µs), and no
-- product is ever formed that could leave the integers a double holds
-- exactly (below 2^53): with rate and burst <= 1e6 and per_ms <= 3.6e6
-- (the bounds the service checks), burst*T <= 3.6e15 µs, k*(T's tick
-- part) < 1e12, and Redis's clock is ~1.8e15 µs. Every time comes from
-- Redis's clock (TIME), never a client's.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- A whole number as Redis should store it (never in exponent form).
local function int(x)
  return string.format('%.0f', x)
end

-- q, r with a = q*d + r and 0 <= r < d, exactly (a, d whole, a < 2^53).
local function divmod(a, d)
  local q = math.floor(a / d)
  local r = a - q * d
  if r < 0 then
    q, r = q - 1, r + d
  elseif r >= d then
    q, r = q + 1, r - d
  end
  return q, r
end

-- The configuration the span arithmetic below works in.
local R, B, Tq, Tr, BT

-- A span of k permits' emission time, k*T, as {µs, ticks}.
local function span(k)
  local q, r = divmod(k * Tr, R)
  return {k * Tq + q, r}
end

local function configure(rate, per_ms, burst)
  R, B = rate, burst
  Tq, Tr = divmod(per_ms * 1000, rate)
  BT = span(burst)
end

local function add(a, b)
  local f = a[2] + b[2]
  if f >= R then
    return {a[1] + b[1] + 1, f - R}
  end
  return {a[1] + b[1], f}
end

-- a - b, for a >= b.
local function sub(a, b)
  local f = a[2] - b[2]
  if f < 0 then
    return {a[1] - b[1] - 1, f + R}
  end
  return {a[1] - b[1], f}
end

local function le(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] <= b[2])
end

-- A span given in (fractional) µs as {µs, ticks}, rounded up to a tick.
local function span_of_us(x)
  local u = math.floor(x)
  local f = math.ceil((x - u) * R)
  if f >= R then
    return {u + 1, 0}
  end
  return {u, f}
end

-- How far tat is ahead of now: the emission time already taken (zero
-- once tat has passed).
local function lag(tat, frac)
  if tat < now then
    return {0, 0}
  end
  return {tat - now, frac}
end

-- Whole permits in the span x (at most `burst`), and what is left over:
-- estimated in floating point, then made exact.
local function whole(x)
  local q = math.floor((x[1] + x[2] / R) / (Tq + Tr / R))
  q = math.max(0, math.min(q, B))
  while q > 0 and not le(span(q), x) do
    q = q - 1
  end
  while q < B and le(span(q + 1), x) do
    q = q + 1
  end
  return q, sub(x, span(q))
end

-- How long until the lag `after` (what a request would leave) is within
-- the burst: 0 when it is now, else in whole µs, rounded up.
local function wait_for(after)
  if le(after, BT) then
    return 0
  end
  local over = sub(after, BT)
  if over[2] > 0 then
    return over[1] + 1
  end
  return over[1]
end

-- Permits that could be admitted right now, given the lag.
local function available(l)
  if not le(l, BT) then
    return 0
  end
  return (whole(sub(BT, l)))
end

-- floor(n * a / d) for whole n, a, d below 2^32, exactly (n * a itself
-- may be beyond what a double holds exactly): n = nh * 2^16 + nl.
local function muldiv(n, a, d)
  local nh, nl = divmod(n, 65536)
  local q1, r1 = divmod(nh * a, d)
  local q2 = divmod(r1 * 65536 + nl * a, d)
  return q1 * 65536 + q2
end

local DAY = {86400000000, 0}

-- The lag of bucket `old` (configured) carried over to a new
-- configuration, which is configured on return. It keeps the permits
-- available now (at most the new burst), and what waiters have reserved
-- beyond them stays owed, converted to the new rate: new requests queue
-- behind it. Every conversion rounds in the strict direction (never more
-- permits than were kept, never less time owed), and the same rate and
-- period convert exactly: carrying a bucket over to the configuration it
-- has leaves its schedule where it was, however often it is repeated.
-- Owed time is capped at one day at the new rate (a wait is never longer).
local function carry_over(old, rate, per_ms, burst)
  local before = lag(old.tat, old.frac)
  local same = old.rate == rate and old.per_ms == per_ms
  if le(before, BT) then
    -- q whole permits available, and `rest` of the next one: n / (per_ms
    -- * 1000) of a permit, with n = rest in ticks (below per_ms * 1000).
    local q, rest = whole(sub(BT, before))
    local n = rest[1] * R + rest[2]
    local old_period = old.per_ms * 1000
    configure(rate, per_ms, burst)
    if q < burst then
      -- (burst - q) permits' time less that part of one at the new rate:
      -- n * per_ms' / per_ms ticks of the new rate, rounded down (so the
      -- lag is rounded up), exact when the rate and period are the same.
      local t = muldiv(n, per_ms * 1000, old_period)
      local part = {divmod(t, R)}
      return sub(span(burst - q), part)
    end
    return {0, 0}
  end
  local owed = sub(before, BT)
  if same then
    configure(rate, per_ms, burst)
  else
    -- Time owed at the old rate, in (fractional) permits, then at the
    -- new one; floating point is off by far less than the 1 µs added.
    local permits = (owed[1] + owed[2] / R) / (Tq + Tr / R)
    configure(rate, per_ms, burst)
    owed = span_of_us(permits * (Tq + Tr / R) + 1)
  end
  if not le(owed, DAY) then
    owed = DAY
  end
  return add(BT, owed)
end

-- A key's bucket is one string: its fields as text, separated by single
-- spaces, in this order (`last` only while there is one):
--   rate per_ms burst gen ver tat frac [last]
-- A string is made, and given its expiry, by one SET; a hash took an
-- HSET and a PEXPIRE, and a read of it an HMGET of seven fields (the
-- book's benchmark chapter, "A key's bucket is one string"). Earlier
-- versions kept it as a hash of those fields: such a bucket, left in
-- Redis by one of them, is read as a hash, and the next write replaces it
-- with the string.
local KEY_BUCKET = '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) ?(%S*)$'

-- The fields of the key's bucket in `key` as text, in the order above,
-- or nil when it has none.
local function read_key_bucket(key)
  local s = redis.pcall('GET', key)
  if type(s) == 'table' and s.err then
    if not string.find(s.err, '^WRONGTYPE') then
      error(s)
    end
    -- A hash an earlier version wrote.
    local c = redis.call('HMGET', key, 'rate', 'per_ms', 'burst', 'gen', 'ver', 'tat', 'frac',
      'last')
    return c[1] and c or nil
  end
  if not s then
    return nil
  end
  local c = {string.match(s, KEY_BUCKET)}
  if not c[1] then
    -- (Neither the key, which names a user's key, nor its value is told.)
    error(redis.error_reply('ERR a rate-limit key bucket holds a value latchkey did not write'))
  end
  return c
end

-- The bucket in `key`, configured for the arithmetic above, or nil; a
-- key's bucket when `keyed` is the configuration its caller knows.
--
-- Two kinds of bucket share every script (a script is built once per
-- kind, after rl_shared.lua or rl_keyed.lua, which set KEYED):
-- - the limiter's own hash ({prefix}{name}:rl), its one shared bucket,
--   which also holds the configuration (rl_set.lua);
-- - a key's bucket ({prefix}{name|<hash>}:rlk:<key>, KEYED), on a hash
--   slot of its own. Its configuration is the limiter's (`keyed`: rate,
--   per_ms, burst, gen the limiter's incarnation and ver its
--   configuration's version, counted by every PUT), read from the
--   limiter's hash on a single Redis, or passed by the caller, as it last
--   read it, on a Redis Cluster (another slot). A key's bucket keeps the
--   configuration it runs under: a caller's newer one (a later
--   incarnation, or a higher version of the same one) is carried over
--   (`carry_over`: what the key has taken stays taken, also into a new
--   incarnation, so a key never gets a second burst from an instance
--   whose copy of a deleted limiter is stale) and kept by the next write;
--   an older one is ignored, so a key never goes back to a configuration
--   it has left. A key that has no bucket (never used, or full again:
--   see `store_lag`) is full under the caller's configuration.
local function load_bucket(key, keyed)
  if not keyed then
    local c = redis.call('HMGET', key, 'rate', 'per_ms', 'burst', 'tat', 'frac', 'gen')
    if not c[1] then
      return nil
    end
    local l = {
      rate = tonumber(c[1]), per_ms = tonumber(c[2]), burst = tonumber(c[3]),
      tat = tonumber(c[4]), frac = tonumber(c[5]), gen = c[6],
    }
    configure(l.rate, l.per_ms, l.burst)
    return l
  end
  local c = read_key_bucket(key)
  local gen, ver = tonumber(keyed.gen), tonumber(keyed.ver)
  if not c then
    configure(keyed.rate, keyed.per_ms, keyed.burst)
    return {
      rate = keyed.rate, per_ms = keyed.per_ms, burst = keyed.burst,
      tat = 0, frac = 0, gen = keyed.gen, ver = ver,
      text = keyed.text, ver_text = keyed.ver,
    }
  end
  -- (A hash an earlier version wrote before versions were counted has no
  -- `ver`: version 0.)
  local l = {
    rate = tonumber(c[1]), per_ms = tonumber(c[2]), burst = tonumber(c[3]),
    gen = c[4], ver = tonumber(c[5] or 0), tat = tonumber(c[6]), frac = tonumber(c[7]),
    last = c[8] ~= '' and c[8] or nil, text = {c[1], c[2], c[3]}, ver_text = c[5] or nil,
  }
  configure(l.rate, l.per_ms, l.burst)
  local older = tonumber(l.gen) < gen
  if older or (tonumber(l.gen) == gen and l.ver < ver) then
    local lag_now = carry_over(l, keyed.rate, keyed.per_ms, keyed.burst)
    l.rate, l.per_ms, l.burst, l.ver = keyed.rate, keyed.per_ms, keyed.burst, ver
    l.gen, l.text, l.ver_text = keyed.gen, keyed.text, keyed.ver
    l.tat, l.frac = now + lag_now[1], lag_now[2]
    -- The last acquire was priced under the old configuration: it can no
    -- longer be given back (rl_give_back.lua), as after a PUT.
    l.carried = true
  end
  return l
end

-- Stores tat = now + the lag l in bucket `key` (`limiter`, as loaded),
-- and `last`, when given, as its last acquire; without it the bucket
-- forgets its last acquire (it can no longer be given back).
--
-- A key's bucket also stores the configuration it runs under, and lives
-- only until it is full again (tat has passed): then it expires, and the
-- key occupies no memory (a full bucket is what a key without one reads
-- as).
local function store_bucket(key, keyed, l, limiter, last)
  if not keyed then
    if last then
      redis.call('HSET', key, 'tat', int(now + l[1]), 'frac', int(l[2]), 'last', last)
    else
      redis.call('HSET', key, 'tat', int(now + l[1]), 'frac', int(l[2]))
      redis.call('HDEL', key, 'last')
    end
    return
  end
  if l[1] == 0 and l[2] == 0 then
    redis.call('DEL', key)
    return
  end
  -- The configuration as the text it was read as, where there is one
  -- (nothing to format); a number is formatted whole (`int`): Lua's own
  -- formatting puts large ones in exponent form.
  local t = limiter.text or {}
  local fields = {t[1] or int(limiter.rate), t[2] or int(limiter.per_ms),
    t[3] or int(limiter.burst), limiter.gen, limiter.ver_text or int(limiter.ver),
    int(now + l[1]), int(l[2]), last}
  -- The value and its expiry in one command: nothing written after the
  -- expiry could outlive it (a write to an expired key would make a new
  -- one, without a TTL). Full again once tat has passed: within this many
  -- ms from now (one more than needed: the ms Redis expires in may have
  -- begun before TIME).
  redis.call('SET', key, table.concat(fields, ' '), 'PX', math.floor(l[1] / 1000) + 2)
end

-- `reply` with the configuration `limiter` runs under appended (rate,
-- per_ms, burst): what an answer's RateLimit header fields describe.
local function with_config(reply, limiter)
  reply[#reply + 1] = limiter.rate
  reply[#reply + 1] = limiter.per_ms
  reply[#reply + 1] = limiter.burst
  return reply
end

-- The script's own bucket: KEYS[1], of the kind rl_shared.lua or
-- rl_keyed.lua said.
local function load_limiter()
  if KEYED == false then
    return nil
  end
  return load_bucket(KEYS[1], KEYED)
end

local function store_lag(l, limiter, last)
  store_bucket(KEYS[1], KEYED, l, limiter, last)
end

-- The attempt id of the script's bucket's last acquire (`last`), or nil.
local function last_acquire(limiter)
  if KEYED then
    return limiter.last
  end
  return redis.call('HGET', KEYS[1], 'last') or nil
end

-- The script's bucket forgets its last acquire, which can then no longer
-- be given back; its lag stays as it is. (A key's bucket is written whole
-- again, with no `last`.)
local function forget_last(limiter)
  if KEYED then
    store_lag(lag(limiter.tat, limiter.frac), limiter)
  else
    redis.call('HDEL', KEYS[1], 'last')
  end
end
