-- rl_slot: a waiter at its reserved time. When the time has come, the
-- reservation is settled: the waiter may be answered "admitted", and its
-- permits can never be given back. Runs after idempotency.lua, rl.lua
-- and rl_record.lua.
--
-- KEYS[2]  the Idempotency-Key's record (see rl_record.lua), or KEYS[1]
--          again without one
-- ARGV[1]  the reservation's incarnation (gen)
-- ARGV[2]  its slot (µs on Redis's clock)
-- ARGV[3]  the attempt id of the acquire that reserved, where the
--          reservation could be given back (no Idempotency-Key), or ''
--
-- Returns  {1, available, rate, per_ms, burst}  the time has come: settled. `available` is what
--                          the limiter could admit now, or with a key the
--                          key's first answer's (rl_record.lua)
--          {0, wait_us}    not yet (the instance's clock is a little
--                          ahead of Redis's)
--          {-1}            no such limiter, or not the reservation's
--                          incarnation (deleted, perhaps created again)
--
-- Invariant: a settled reservation is never given back. A give-back
-- (rl_give_back.lua) takes back only the acquire `last` names; settling
-- clears `last` when it names this reservation's acquire, in the same
-- script that says the waiter may be admitted, so every give-back of it
-- that runs later refuses, however late or often it is retried. (The
-- service gives a reservation back only once its request has ended
-- unanswered, so no settle follows a give-back.) Settling again changes
-- nothing and answers the same.
local record = rl_record()
local limiter = load_limiter()
if not limiter or limiter.gen ~= ARGV[1] then
  return {-1}
end
local slot = tonumber(ARGV[2])
if now < slot then
  return {0, slot - now}
end
if ARGV[3] ~= '' and last_acquire(limiter) == ARGV[3] then
  forget_last(limiter)
end
if record and record.gen == ARGV[1] and record.slot == slot then
  return with_config({1, rl_answered(record, limiter)}, limiter)
end
return with_config({1, available(lag(limiter.tat, limiter.frac))}, limiter)
