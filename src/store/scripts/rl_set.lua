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
-- rate: new requests queue behind it. Reservations already made keep the
-- time they were promised, and keep their incarnation (`gen`); the last
-- acquire can no longer be given back (it was priced at the old rate).
-- Owed time is capped at one day at the new rate (a wait is never longer).
local rate, per_ms, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local old = load_limiter()
local l = {0, 0}
if old then
  local before = lag(old.tat, old.frac)
  local T = Tq + Tr / R
  if le(before, BT) then
    -- q whole permits available and a fraction phi of the next one.
    local q, rest = whole(sub(BT, before))
    local phi = (rest[1] + rest[2] / R) / T
    configure(rate, per_ms, burst)
    if q < burst then
      -- (burst - q - phi) * T, rounded up (never more permits than kept).
      local part = span_of_us(phi * (Tq + Tr / R))
      local full = span(burst - q)
      if le(part, full) then
        l = sub(full, part)
      end
    end
  else
    local owed = sub(before, BT)
    local permits = (owed[1] + owed[2] / R) / T
    configure(rate, per_ms, burst)
    local us = math.min(permits * (Tq + Tr / R), 86400000000)
    l = add(BT, span_of_us(us))
  end
  redis.call('HDEL', KEYS[1], 'last')
else
  configure(rate, per_ms, burst)
  redis.call('HSET', KEYS[1], 'gen', int(now))
end
redis.call('HSET', KEYS[1], 'rate', ARGV[1], 'per_ms', ARGV[2], 'burst', ARGV[3])
store_lag(l)
return {available(l)}
