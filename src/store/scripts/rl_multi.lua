-- rl_multi: take permits from several buckets at once, from all or from
-- none. Runs after rl_shared.lua and rl.lua.
--
-- KEYS[i]  bucket i: a limiter's shared bucket, or a key's bucket (see
--          rl.lua's `load_limiter`)
-- ARGV[1]  attempt id (what a give-back names)
-- ARGV[2]  the longest the request may wait, in µs
-- ARGV[3]  not before: the permits may be the request's no sooner than
--          this many µs from now (0: as soon as every bucket admits)
-- then six ARGV per bucket, from ARGV[4 + 6 * (i - 1)]: its permits k,
--          and, for a key's bucket, the configuration its caller knows
--          (rate, per_ms, burst, gen, ver), or '#' and four '' to read it
--          from the limiter's hash KEYS[n + i] (a single Redis); five ''
--          for a shared bucket
-- KEYS[n + i]  with '#': bucket i's limiter's hash
--
-- Returns  {1, 0, slot, 0, gen_1, available_1, rate_1, per_ms_1, burst_1,
--              ...}  admitted now
--          {2, wait_us, slot, 0, gen_1, available_1, rate_1, ...}  reserved: every
--                             bucket's permits are the request's at `slot`
--                             (µs on Redis's clock), wait_us from now
--          {0, wait_us, 0, i, available_i, rate_i, per_ms_i, burst_i}
--                             nothing taken: every bucket
--                             admits in wait_us, later than the request
--                             may wait; bucket i waits longest
--          {-1, 0, 0, i}      bucket i's limiter does not exist
--          {-2, 0, 0, i, burst}  k is more than bucket i's burst
--
-- Invariant: the request's permits are taken in every bucket as one
-- admission at one instant, `slot`, the first at which every bucket
-- admits its k (and not before ARGV[3]): each bucket's emission time
-- for them starts at `slot` or later (tat = max(tat, slot) + k*T), so
-- however long the slowest bucket makes the request wait, no other bucket
-- hands out the same time twice, and each bucket's bound holds for the
-- instant the request is answered. A bucket that could have admitted
-- sooner stays idle for the others until then (its time up to `slot` is
-- not handed out twice, nor given back: rl_give_back.lua returns only
-- k*T). Each bucket's `last` names the attempt, as a single acquire's.
local n = math.floor((#ARGV - 3) / 6)
local buckets = {}
local longest, worst = 0, 1
for i = 1, n do
  local at = 4 + 6 * (i - 1)
  local k = tonumber(ARGV[at])
  local keyed = nil
  if ARGV[at + 1] == '#' then
    local c = redis.call('HMGET', KEYS[n + i], 'rate', 'per_ms', 'burst', 'gen', 'ver')
    if not c[1] then
      return {-1, 0, 0, i}
    end
    keyed = {
      rate = tonumber(c[1]), per_ms = tonumber(c[2]), burst = tonumber(c[3]),
      gen = c[4], ver = c[5] or '0', text = {c[1], c[2], c[3]},
    }
  elseif ARGV[at + 1] ~= '' then
    keyed = {
      rate = tonumber(ARGV[at + 1]), per_ms = tonumber(ARGV[at + 2]),
      burst = tonumber(ARGV[at + 3]), gen = ARGV[at + 4], ver = ARGV[at + 5],
      text = {ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]},
    }
  end
  local limiter = load_bucket(KEYS[i], keyed)
  if not limiter then
    return {-1, 0, 0, i}
  end
  if k > B then
    return {-2, 0, 0, i, B}
  end
  local l = lag(limiter.tat, limiter.frac)
  local wait = wait_for(add(l, span(k)))
  buckets[i] = {limiter = limiter, keyed = keyed, k = k, lag = l}
  if wait > longest then
    longest, worst = wait, i
  end
end
local w = math.max(longest, tonumber(ARGV[3]))
if w > tonumber(ARGV[2]) then
  local b = buckets[worst].limiter
  configure(b.rate, b.per_ms, b.burst)
  return with_config({0, w, 0, worst, available(buckets[worst].lag)}, b)
end
local reply = {w == 0 and 1 or 2, w, now + w, 0}
for i = 1, n do
  local b = buckets[i]
  configure(b.limiter.rate, b.limiter.per_ms, b.limiter.burst)
  local from = b.lag
  if le(from, {w, 0}) then
    from = {w, 0}
  end
  local after = add(from, span(b.k))
  store_bucket(KEYS[i], b.keyed, after, b.limiter, ARGV[1])
  reply[#reply + 1] = b.limiter.gen
  reply[#reply + 1] = available(after)
  with_config(reply, b.limiter)
end
return reply
