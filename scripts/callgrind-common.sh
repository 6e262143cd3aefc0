# Sourced by scripts/callgrind.sh and scripts/redis-callgrind.sh (from the
# repository's root): checks for valgrind and redis-server, and sets up
# what both need: a scratch directory `$work`, the PIDs of the processes a
# run starts (`redis_pid`, `service_pid`), stopped with the scratch
# directory removed on exit, and `free_port`.
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
scripts/ensure-redis.sh >/dev/null

work=$(mktemp -d)
redis_pid=
service_pid=
cleanup() {
    [ -n "$service_pid" ] && kill "$service_pid" 2>/dev/null || true
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
