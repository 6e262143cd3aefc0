-- rl_keyed: the scripts of a key's own bucket (joined before rl.lua; see
-- its `load_limiter`): KEYS[1] is the key's bucket. The limiter's
-- configuration is read from its own hash, KEYS[3], where the script can
-- reach it (a single Redis); on a Redis Cluster (another slot) the caller
-- passes it as the last five ARGV. KEYED is false when the limiter does
-- not exist.
local KEYED
if KEYS[3] then
  local c = redis.call('HMGET', KEYS[3], 'rate', 'per_ms', 'burst', 'gen', 'ver')
  KEYED = false
  if c[1] then
    KEYED = {
      rate = tonumber(c[1]), per_ms = tonumber(c[2]), burst = tonumber(c[3]),
      gen = c[4], ver = c[5] or '0', text = {c[1], c[2], c[3]},
    }
  end
else
  KEYED = {
    rate = tonumber(ARGV[#ARGV - 4]),
    per_ms = tonumber(ARGV[#ARGV - 3]),
    burst = tonumber(ARGV[#ARGV - 2]),
    gen = ARGV[#ARGV - 1],
    ver = ARGV[#ARGV],
    text = {ARGV[#ARGV - 4], ARGV[#ARGV - 3], ARGV[#ARGV - 2]},
  }
end
