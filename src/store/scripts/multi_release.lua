-- multi_release: drop one hold of the holder on every lock of the set, or
-- none. Runs after lock_plain.lua, lock.lua and multi.lua.
--
-- Returns  {1, i, j, ...}  released: the locks (by index) that became free
--                          (their waiters were woken)
--          {0, i, j, ...}  the locks the holder does not hold; nothing was
--                          released
local holder = ARGV[1]
local gaps = missing(holder)
if gaps then
  return gaps
end
local freed = {1}
for i = 1, COUNT do
  if release(hash_of(i), channel_of(i), holder, false)[1] == 1 then
    freed[#freed + 1] = i
  end
end
return freed
