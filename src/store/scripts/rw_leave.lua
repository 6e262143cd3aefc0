-- rw_leave: what DELETE /rwlocks/{name}/holders/{holder} runs first,
-- joined before rw_release (whose arguments it shares): a holder that
-- waits in the queue — for the mode in ARGV[5], or for either with '' —
-- leaves it at once and releases nothing; otherwise the request goes on
-- as a release. Leaving comes first so that a client that gives up waiting
-- (one whose earlier long-poll still keeps a place, say) never releases a hold it still counts
-- on (a second DELETE releases). Runs after queue.lua, rw.lua and
-- queue_refresh.
--
-- KEYS     as rw.lua's (the holds KEYS[1], the queue KEYS[4..6])
-- ARGV[2]  holder id, ARGV[5] 'r', 'w' or '' (the DELETE's ?mode)
--
-- Returns  {2, hold_count, mode}  it left the queue; mode is what it
--                                 waited for ('w' when both), hold_count
--                                 the holds it keeps in that mode
-- and otherwise what rw_release returns. When it leaves, the queue is
-- woken: whoever can be granted now goes.
--
-- Nobody waits (one EXISTS): nothing to leave, and the release refreshes
-- with what it reads anyway. Otherwise the queue is refreshed first, so
-- that an entry whose place lapsed is not left but released.
if not queue_absent() then
  refresh()
end
local quitter, wanted = ARGV[2], ARGV[5]
local gone
-- With both modes to look for and nobody queued, nothing to leave: one
-- call instead of one per mode.
local queued = wanted ~= '' or (not queue_absent() and redis.call('ZCARD', KEYS[4]) > 0)
if queued then
  for _, m in ipairs({'w', 'r'}) do
    if (wanted == '' or wanted == m) and leave_queue(m .. '|' .. quitter, true) then
      gone = gone or m
    end
  end
end
if gone then
  wake()
  local kept = 0
  if gone == 'r' then
    kept = tonumber(redis.call('HGET', KEYS[1], 'r|' .. quitter) or '0')
  elseif redis.call('HGET', KEYS[1], 'w') == quitter then
    kept = tonumber(redis.call('HGET', KEYS[1], 'wc'))
  end
  return {2, kept, gone}
end
