#!/usr/bin/env bash
# The service's own instructions per request, by callgrind (the book's
# "Ablations (what paid, what did not)" (docs/src/benchmark.md), rounds 2
# and 3): the release service under
# `valgrind --tool=callgrind`, against a private redis-server, answering
# sequential acquire+release pairs of one lock (or another primitive:
# CALLGRIND_KIND below) and `GET /healthz` requests
# over one keep-alive connection. Three runs: 200 pairs + 200 /healthz,
# 1 200 pairs + 200 /healthz, 200 pairs + 1 200 /healthz; the differences
# ÷ 1 000 are the instructions per pair and per /healthz with start-up and
# shutdown taken out.
#
#   scripts/callgrind.sh [BINARY]          # default target/release/latchkey
#   LATCHKEY_LOG=warn scripts/callgrind.sh # the log level (default info)
#   CALLGRIND_ALLOCS=1 scripts/callgrind.sh  # also heap blocks per request (dhat)
#   CALLGRIND_KEEP=DIR scripts/callgrind.sh  # keep the callgrind.out files
#                                            # (for callgrind_annotate) in DIR
#   CALLGRIND_KIND=semaphore scripts/callgrind.sh  # pairs of another
#       primitive: lock (the default), semaphore (one permit of 64),
#       read (a read lock), rate-limiter (one acquire of a shared bucket
#       of 1 000 000 per second: a "pair" is that one acquire) or
#       rate-limiter-key (the same with a key of its own per acquire)
#
# Instructions do not depend on the machine's load, so this is the
# comparison of two builds that a shared, noisy machine cannot swamp. The
# service is pinned to one core (`taskset`), as the benchmark pins it, so
# its runtime has one worker thread: with two, how the requests' tasks
# spread over the threads changed from run to run, and with it the count
# by up to 10 % for /healthz.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(realpath "${1:-target/release/latchkey}")
level=${LATCHKEY_LOG:-info}
few=200
many=1200
kind=${CALLGRIND_KIND:-lock}
case "$kind" in
lock | semaphore | read | rate-limiter | rate-limiter-key) ;;
*)
    echo "CALLGRIND_KIND must be lock, semaphore, read, rate-limiter or rate-limiter-key, not $kind" >&2
    exit 2
    ;;
esac
# valgrind and redis-server, $work, the run's PIDs and free_port.
source scripts/callgrind-common.sh

# The first core this script may use.
cpu=$(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.1; done

# Sends `pairs` acquire+release pairs of one object of $kind (a semaphore
# is made first, in every run, so it cancels out), then `gets`
# GET /healthz, over one keep-alive connection; every answer is checked.
drive() {
    python3 - "$1" "$2" "$3" "$kind" <<'EOF'
import http.client, socket, sys, time
port, pairs, gets = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
kind = sys.argv[4]
deadline = time.time() + 120
while True:  # a bare connect (no request) until the service listens
    try:
        socket.create_connection(("127.0.0.1", port)).close()
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("the service did not start listening")
        time.sleep(0.2)
conn = http.client.HTTPConnection("127.0.0.1", port)
def ask(method, path, body, want):
    headers = {"Content-Type": "application/json"} if body else {}
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    text = response.read()
    if response.status != want:
        sys.exit(f"{method} {path}: {response.status} {text!r}")
base = {
    "lock": "/locks/callgrind",
    "semaphore": "/semaphores/callgrind",
    "read": "/rwlocks/callgrind",
    "rate-limiter": "/rate-limiters/callgrind",
    "rate-limiter-key": "/rate-limiters/callgrind",
}[kind]
acquire = base + ("/read/acquire" if kind == "read" else "/acquire")
if kind == "semaphore":
    ask("PUT", base, b'{"permits":64}', 200)
if kind.startswith("rate-limiter"):
    ask("PUT", base, b'{"rate":1000000,"per_ms":1000,"burst":1000}', 200)
    for i in range(pairs):
        key = f',"key":"user-{i}"' if kind == "rate-limiter-key" else ""
        ask("POST", acquire, f'{{"permits":1{key}}}'.encode(), 200)
else:
    for _ in range(pairs):
        ask("POST", acquire, b'{"holder":"callgrind-1"}', 201)
        ask("DELETE", base + "/holders/callgrind-1", None, 200)
for _ in range(gets):
    ask("GET", "/healthz", None, 200)
conn.close()
EOF
}

# One run of the service under `valgrind $tool_args`, driven by `drive`;
# its valgrind output goes to $work/$name.
run() {
    local name=$1 pairs=$2 gets=$3
    shift 3
    local port
    port=$(free_port)
    env -u LATCHKEY_REDLOCK_NODES \
        LATCHKEY_LISTEN="127.0.0.1:$port" \
        LATCHKEY_REDIS_URL="redis://127.0.0.1:$redis_port" \
        LATCHKEY_LOG="$level" \
        taskset -c "$cpu" valgrind "$@" "$binary" >"$work/$name.stdout" 2>"$work/$name.stderr" &
    service_pid=$!
    drive "$port" "$pairs" "$gets"
    kill -TERM "$service_pid"
    wait "$service_pid" || true
    service_pid=
}

instructions() {
    local name=$1 pairs=$2 gets=$3
    run "$name" "$pairs" "$gets" --tool=callgrind --callgrind-out-file="$work/$name.out"
    sed -n 's/^summary: //p' "$work/$name.out"
}

blocks() {
    local name=$1 pairs=$2 gets=$3
    run "$name" "$pairs" "$gets" --tool=dhat --dhat-out-file=/dev/null
    sed -n 's/^.*Total: *[0-9,]* bytes in \([0-9,]*\) blocks.*$/\1/p' "$work/$name.stderr" | tr -d ,
}

per() { echo "scale=1; ($2 - $1) / ($many - $few)" | bc; }

base=$(instructions base $few $few)
pairs=$(instructions pairs $many $few)
gets=$(instructions gets $few $many)
echo "binary: $binary"
echo "LATCHKEY_LOG=$level"
echo "instructions per $kind pair: $(per "$base" "$pairs")"
echo "instructions per GET /healthz: $(per "$base" "$gets")"
if [ -n "${CALLGRIND_KEEP:-}" ]; then
    mkdir -p "$CALLGRIND_KEEP"
    cp "$work"/*.out "$CALLGRIND_KEEP"/
    echo "callgrind files: $CALLGRIND_KEEP/{base,pairs,gets}.out"
fi
if [ -n "${CALLGRIND_ALLOCS:-}" ]; then
    base=$(blocks base-heap $few $few)
    pairs=$(blocks pairs-heap $many $few)
    gets=$(blocks gets-heap $few $many)
    echo "heap blocks allocated per $kind pair: $(per "$base" "$pairs")"
    echo "heap blocks allocated per GET /healthz: $(per "$base" "$gets")"
fi
