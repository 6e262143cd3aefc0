-- latch_count_down: count a latch down, at most once per idempotency key.
--
-- KEYS[1]  latch  {prefix}{name}:latch  (string: the count)
-- KEYS[2]  the idempotency record {prefix}{name}:latch:idem:<key>, or
--          KEYS[1] again when the request has no Idempotency-Key
-- ARGV[1]  wake channel {prefix}{name}:latch:wake
-- ARGV[2]  by (>= 1)
-- ARGV[3]  how long an idempotency record is kept, in ms
--
-- Returns  {1, count}   counted down; count is what is left (0: it opened)
--          {2, count}   this key already counted down within the record's
--                       life: the first reply's count, nothing changed
--          {-1}         no such latch (never set, opened, expired or
--                       deleted); no record is kept, so a retry with the
--                       same key counts once the latch exists
--
-- Invariant: the count never goes below 0; at 0 the latch is deleted (a
-- missing latch is open) and every waiter on every instance is told so
-- by one message. Every change publishes the new state for the waiters
-- to answer from without a read: '<count>|<remaining life in ms>', and
-- '0|0' when it opened. The record (idempotency.lua) is written in the
-- same script as the count-down, so retries that race count once.
local first = idem_replay()
if first then
  return {2, tonumber(first)}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local count = redis.call('DECRBY', KEYS[1], ARGV[2])
if count <= 0 then
  count = 0
  redis.call('DEL', KEYS[1])
  redis.call(PUBLISH, ARGV[1], '0|0')
else
  local life = redis.call('PTTL', KEYS[1])
  if life < 0 then life = 0 end
  redis.call(PUBLISH, ARGV[1], count .. '|' .. life)
end
idem_record(count, ARGV[3])
return {1, count}
