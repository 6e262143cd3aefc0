-- rl_keyed: the scripts of a key's own bucket (joined before rl.lua; see
-- its `load_limiter`): KEYS[1] is the key's bucket, and the limiter's
-- configuration as the caller knows it is the last five ARGV.
local KEYED = {
  rate = tonumber(ARGV[#ARGV - 4]),
  per_ms = tonumber(ARGV[#ARGV - 3]),
  burst = tonumber(ARGV[#ARGV - 2]),
  gen = ARGV[#ARGV - 1],
  ver = ARGV[#ARGV],
}
