-- rl_state: a rate limiter's configuration and the permits available now.
-- Runs after rl.lua.
--
-- Returns  {rate, per_ms, burst, available}
--          {-1}  no such limiter
--
-- Read-only.
local limiter = load_limiter()
if not limiter then
  return {-1}
end
return {limiter.rate, limiter.per_ms, limiter.burst, available(lag(limiter.tat, limiter.frac))}
