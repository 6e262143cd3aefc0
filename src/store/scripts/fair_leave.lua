-- fair_leave: what DELETE /fair-locks/{name}/holders/{holder} runs first,
-- joined before lock_release (whose arguments it shares): a holder that
-- waits in the queue leaves it at once and releases nothing; otherwise the
-- request goes on as a release. Leaving comes first so that a client that
-- gives up waiting never releases a hold it still counts on (a second
-- DELETE releases). Runs after queue.lua, lock_fair and lock.
--
-- KEYS[1]  lock hash, KEYS[4..6] the queue (queue.lua)
-- ARGV[2]  holder id
--
-- Returns  {2, hold_count}  it left the queue; hold_count is what it still
--                           holds (0, but for a holder that also held)
-- and otherwise what lock_release returns. When it leaves, the queue is
-- woken: the new head is let go if the lock is free.
local pruned = #prune() > 0
local gone = leave_queue(ARGV[2], true)
if pruned or gone then
  wake(redis.call('EXISTS', KEYS[1]) == 0)
end
if gone then
  local h = redis.call('HMGET', KEYS[1], 'holder', 'count')
  return {2, h[1] == ARGV[2] and tonumber(h[2]) or 0}
end
