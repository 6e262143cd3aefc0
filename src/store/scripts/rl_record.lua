-- rl_record: what an Idempotency-Key records on a rate limiter, for the
-- scripts that answer a request carrying one (joined after
-- idempotency.lua and rl.lua).
--
-- The record is '<gen>|<slot µs>|<permits>' when the key's first request
-- is admitted or reserves (gen: the limiter's incarnation; slot: when the
-- permits are the request's, on Redis's clock), and '|<available>' is
-- added when a request with the key is first answered "admitted": every
-- later answer for the key replays that one exactly.

-- The key's record as {gen, slot, k, answered}, answered nil until the
-- first answer; nil when the request has no key or the key no record.
local function rl_record()
  local first = idem_replay()
  if not first then
    return nil
  end
  local gen, slot, k, answered = string.match(first, '^(%d+)|(%d+)|(%d+)|?(%d*)$')
  if not gen then
    return nil
  end
  return {gen = gen, slot = tonumber(slot), k = tonumber(k), answered = tonumber(answered)}
end

-- The `available` of the key's answer "admitted": the first one's, or, for
-- the first, what the limiter could admit now (then recorded).
local function rl_answered(record, limiter)
  if record.answered then
    return record.answered
  end
  local a = available(lag(limiter.tat, limiter.frac))
  idem_amend(record.gen .. '|' .. int(record.slot) .. '|' .. record.k .. '|' .. a)
  return a
end
