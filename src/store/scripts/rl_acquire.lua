-- rl_acquire: take k permits now, or reserve them for when they come.
-- Runs after idempotency.lua, rl.lua and rl_record.lua.
--
-- KEYS[2]  the Idempotency-Key's record {prefix}{name}:rl:idem:<key>
--          (see rl_record.lua), or KEYS[1] again without one
-- ARGV[1]  permits k (>= 1)
-- ARGV[2]  the longest the request may wait, in µs (0: not at all)
-- ARGV[3]  attempt id (what a give-back names)
-- ARGV[4]  how long a record is kept, in ms
--
-- Returns (the first three followed by the bucket's rate, per_ms, burst)
--          {1, k, available}        admitted now
--          {2, k, wait_us, gen, slot}  reserved: admitted at `slot` (µs on
--                                   Redis's clock), wait_us from now, in
--                                   the incarnation `gen`
--          {0, wait_us, available}  not admitted, nothing reserved: k
--                                   permits are available in wait_us
--          {-1}                     no such limiter (or, for a replay,
--                                   not the incarnation the key counted in)
--          {-2, burst}              k > burst: never admissible
--
-- Invariant: a reservation moves tat exactly like an admission, so
-- waiters are admitted in the order they arrived, each at the first
-- instant the GCRA bound allows (no later request can take its permits),
-- and a large request is never overtaken by small ones. A key's record
-- is written with the change it stands for; a replay takes nothing and
-- answers what the key's first request got: the same reservation while
-- it is pending, then exactly the first answer "admitted" (its
-- `available` too, not the limiter's now).
local record = rl_record()
local limiter = load_limiter()
if record then
  if not limiter or limiter.gen ~= record.gen then
    return {-1}
  end
  if now >= record.slot then
    return with_config({1, record.k, rl_answered(record, limiter)}, limiter)
  end
  return with_config({2, record.k, record.slot - now, record.gen, record.slot}, limiter)
end
if not limiter then
  return {-1}
end
local k = tonumber(ARGV[1])
if k > B then
  return {-2, B}
end
local after = add(lag(limiter.tat, limiter.frac), span(k))
local wait = wait_for(after)
if wait > tonumber(ARGV[2]) then
  return with_config({0, wait, available(lag(limiter.tat, limiter.frac))}, limiter)
end
store_lag(after, limiter, ARGV[3])
-- A record's text is made only where a key keeps it (formatting its
-- numbers was a tenth of an acquire's cost in Redis).
if wait == 0 then
  local a = available(after)
  if IDEM_KEYED then
    idem_record(limiter.gen .. '|' .. int(now) .. '|' .. k .. '|' .. a, ARGV[4])
  end
  return with_config({1, k, a}, limiter)
end
if IDEM_KEYED then
  idem_record(limiter.gen .. '|' .. int(now + wait) .. '|' .. k, ARGV[4])
end
return with_config({2, k, wait, limiter.gen, now + wait}, limiter)
