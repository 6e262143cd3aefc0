-- rl_state: a rate limiter's configuration and the permits available now;
-- with a reservation, whether its time has come. Runs after rl.lua.
--
-- ARGV[1]  the reservation's incarnation (gen), or '' for a plain read
-- ARGV[2]  the reservation's slot (µs on Redis's clock), or ''
--
-- Returns  {rate, per_ms, burst, available, wait_us}: wait_us is how long
--          until the slot (0: it has come, or no reservation was named)
--          {-1}  no such limiter, or not the reservation's incarnation
--          (it was deleted, and perhaps created again)
--
-- Read-only.
local limiter = load_limiter()
if not limiter or (ARGV[1] ~= '' and limiter.gen ~= ARGV[1]) then
  return {-1}
end
local wait = 0
if ARGV[2] ~= '' then
  wait = math.max(0, tonumber(ARGV[2]) - now)
end
return {limiter.rate, limiter.per_ms, limiter.burst, available(lag(limiter.tat, limiter.frac)), wait}
