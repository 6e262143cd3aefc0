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

-- Permits that could be admitted right now, given the lag.
local function available(l)
  if not le(l, BT) then
    return 0
  end
  return (whole(sub(BT, l)))
end

-- The limiter, configured for the arithmetic above, or nil.
local function load_limiter()
  local c = redis.call('HMGET', KEYS[1], 'rate', 'per_ms', 'burst', 'tat', 'frac', 'gen')
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

-- Stores tat = now + the lag l.
local function store_lag(l)
  redis.call('HSET', KEYS[1], 'tat', int(now + l[1]), 'frac', int(l[2]))
end
