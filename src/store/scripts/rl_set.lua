-- rl_set: configure a rate limiter, creating it or changing it at once.
-- Runs after rl.lua (the layout and the arithmetic there).
--
-- ARGV[1]  rate (1..1e6)
-- ARGV[2]  per_ms (1..3.6e6)
-- ARGV[3]  burst (1..1e6)
--
-- Returns  {available}: permits that could be admitted right now.
--
-- Invariant: a new limiter starts full (burst permits available). A
-- change keeps the permits available now (at most the new burst), and
-- what waiters have reserved beyond them stays owed, converted to the new
-- rate: new requests queue behind it. Every conversion rounds in the
-- strict direction (never more permits than were kept, never less time
-- owed), and the same rate and period convert exactly: a PUT of the
-- configuration the limiter has leaves its schedule where it was, however
-- often it is repeated. Reservations already made keep the time they
-- were promised, and keep their incarnation (`gen`); the last acquire can
-- no longer be given back (it was priced at the old rate). Owed time is
-- capped at one day at the new rate (a wait is never longer).
local rate, per_ms, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local DAY = {86400000000, 0}

-- floor(n * a / d) for whole n, a, d below 2^32, exactly (n * a itself
-- may be beyond what a double holds exactly): n = nh * 2^16 + nl.
local function muldiv(n, a, d)
  local nh, nl = divmod(n, 65536)
  local q1, r1 = divmod(nh * a, d)
  local q2 = divmod(r1 * 65536 + nl * a, d)
  return q1 * 65536 + q2
end

local old = load_limiter()
local l = {0, 0}
if old then
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
      l = sub(span(burst - q), part)
    end
  else
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
    l = add(BT, owed)
  end
  redis.call('HDEL', KEYS[1], 'last')
else
  configure(rate, per_ms, burst)
  redis.call('HSET', KEYS[1], 'gen', int(now))
end
redis.call('HSET', KEYS[1], 'rate', ARGV[1], 'per_ms', ARGV[2], 'burst', ARGV[3])
store_lag(l)
return {available(l)}
