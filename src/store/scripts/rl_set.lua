-- rl_set: configure a rate limiter, creating it or changing it at once.
-- Runs after rl.lua (the layout and the arithmetic there).
--
-- ARGV[1]  rate (1..1e6)
-- ARGV[2]  per_ms (1..3.6e6)
-- ARGV[3]  burst (1..1e6)
--
-- Returns  {available, gen, ver}: permits that could be admitted right
--          now, the limiter's incarnation and its configuration's version
--          (every PUT counts one: keys' buckets carry a newer version over,
--          see rl.lua's `load_limiter`).
--
-- Invariant: a new limiter starts full (burst permits available). A
-- change carries the shared bucket over (rl.lua's `carry_over`: the
-- permits available now are kept, what waiters reserved stays owed, a PUT
-- of the configuration the limiter has leaves its schedule where it was).
-- Reservations already made keep the time they
-- were promised, and keep their incarnation (`gen`); the last acquire can
-- no longer be given back (it was priced at the old rate).
local rate, per_ms, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local old = load_limiter()
local l = {0, 0}
if old then
  l = carry_over(old, rate, per_ms, burst)
else
  configure(rate, per_ms, burst)
  redis.call('HSET', KEYS[1], 'gen', int(now))
end
redis.call('HSET', KEYS[1], 'rate', ARGV[1], 'per_ms', ARGV[2], 'burst', ARGV[3])
local ver = redis.call('HINCRBY', KEYS[1], 'ver', 1)
-- (Stored without `last`: the limiter forgets it.)
store_lag(l)
return {available(l), redis.call('HGET', KEYS[1], 'gen'), ver}
