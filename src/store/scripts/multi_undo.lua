-- multi_undo: give back exactly what one multi-lock attempt granted on
-- each lock of the set (see undo in lock.lua), and mark the attempt given
-- up on every lock. Runs after lock_plain.lua, lock.lua and multi.lua.
--
-- Returns  how many locks gave back a hold of the attempt.
local given = 0
for i = 1, COUNT do
  given = given + undo(hash_of(i), KEYS[3 * i], channel_of(i), ARGV[1], ARGV[3], ARGV[4])
end
return given
