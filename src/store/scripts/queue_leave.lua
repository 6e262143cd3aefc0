-- queue_leave: a waiter's request ended without a grant (its client went
-- away): its queue entry now lapses one grace from now, so the client
-- keeps its place if it polls again in time. Runs after queue.lua (fair
-- locks and read-write locks; plain locks keep no queue).
--
-- ARGV[2]  the queue member: the holder id (rwlocks: '<r|w>|<holder>')
--
-- Returns  1 when the holder had an entry, 0 otherwise.
if redis.call('ZSCORE', KEYS[4], ARGV[2]) then
  redis.call('ZADD', KEYS[5], 'XX', now + tonumber(ARGV[3]), ARGV[2])
  expire_queue()
  return 1
end
return 0
