-- sem_leave: what DELETE /semaphores/{name}/holders/{holder} runs first,
-- joined before sem_release (whose arguments it shares): a holder that
-- waits in the queue (for any number of permits) leaves it at once and
-- gives back nothing; otherwise the request goes on as a release. Leaving
-- comes first so that a client that gives up waiting for more permits
-- never gives back the permits it still counts on (a second DELETE does).
-- Runs after queue.lua, sem.lua and queue_refresh.
--
-- The holder's entries are '<permits>|<holder>': a scan of the queue finds
-- them (holder ids hold no glob characters). It runs only while someone
-- waits, and costs one pass over the queue.
--
-- Returns  -2  it left the queue
-- and otherwise what sem_release returns. When it leaves, the queue is
-- woken: the waiters the permits now serve go.
refresh()
local quitter = ARGV[2]
local gone = false
if redis.call('EXISTS', KEYS[4]) == 1 then
  local cursor = '0'
  repeat
    local page = redis.call('ZSCAN', KEYS[4], cursor, 'MATCH', '*|' .. quitter, 'COUNT', 1000)
    cursor = page[1]
    for i = 1, #page[2], 2 do
      gone = leave_queue(page[2][i]) or gone
    end
  until cursor == '0'
end
if gone then
  wake()
  return -2
end
