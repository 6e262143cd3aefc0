-- sem_leave: what DELETE /semaphores/{name}/holders/{holder} runs first,
-- joined before sem_release (whose arguments it shares): a holder that
-- waits in the queue (for any number of permits) leaves it at once and
-- gives back nothing; otherwise the request goes on as a release. Leaving
-- comes first so that a client that gives up waiting for more permits
-- never gives back the permits it still counts on (a second DELETE does).
-- Runs after queue.lua, sem.lua and queue_refresh.
--
-- The holder's entries are '<permits>|<holder>' (holder ids hold no '|'):
-- one pass over the queue, in pages, finds them (only while someone
-- waits; by ZCARD and ZRANGE, commands the ACL of the book's "Redis over
-- TLS and with ACL users" (docs/src/tls-acl.md) already allows).
--
-- KEYS     as sem.lua's (the queue KEYS[4..6])
-- ARGV[2]  holder id
--
-- Returns  -2  it left the queue
-- and otherwise what sem_release returns. When it leaves, the queue is
-- woken: the waiters the permits now serve go.
-- Nobody waits (one EXISTS): nothing to leave, and the release refreshes
-- with what it reads anyway (none of this runs: no table, no call).
-- Otherwise the queue is refreshed first, so that an entry whose place
-- lapsed is not left but released.
if not queue_absent() then
  refresh()
  local suffix = '|' .. ARGV[2]
  local mine = {}
  local queued = redis.call('ZCARD', KEYS[4])
  for first = 0, queued - 1, 1000 do
    for _, member in ipairs(redis.call('ZRANGE', KEYS[4], first, first + 999)) do
      if string.sub(member, -#suffix) == suffix then
        mine[#mine + 1] = member
      end
    end
  end
  local gone = false
  for _, member in ipairs(mine) do
    gone = leave_queue(member, true) or gone
  end
  if gone then
    wake()
    return -2
  end
end
