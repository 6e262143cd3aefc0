-- rl_give_back: return the permits of an acquire whose requester is gone
-- (it left while waiting for its reservation, or never got the answer).
-- Runs after rl.lua.
--
-- ARGV[1]  the acquire's attempt id
-- ARGV[2]  its permits k
--
-- Returns  1 when given back, 0 when nothing was (see below).
--
-- Invariant: only the last acquire is given back (`last` names it): then
-- nothing was reserved after it, so no later waiter's promised time
-- depends on its permits. At most k permits' time is given back, once
-- (`last` is cleared), and never more than is taken now (the lag does not
-- go below zero). Never a reservation that was settled (rl_slot.lua
-- clears `last` then: its waiter may have been admitted), nor after a
-- reconfiguration (it clears `last` too; a key's bucket carried over to
-- a new configuration here and now counts as one).
local limiter = load_limiter()
if not limiter or limiter.carried or last_acquire(limiter) ~= ARGV[1] then
  return 0
end
local l = lag(limiter.tat, limiter.frac)
local k = span(tonumber(ARGV[2]))
if le(k, l) then
  l = sub(l, k)
else
  l = {0, 0}
end
-- (Stored without `last`: the bucket forgets it.)
store_lag(l, limiter)
return 1
