#!/usr/bin/env bash
# Redis's own instructions per acquire + release, by callgrind (the book's
# "Ablations (what paid, what did not)" (docs/src/benchmark.md), round 3's
# scripts): a private redis-server 7 under `valgrind --tool=callgrind`,
# the release service (not under valgrind) in front of it, answering
# sequential pairs over one keep-alive connection, as users send them:
#
#   lock       POST /locks/{name}/acquire, DELETE …/holders/{holder}
#   semaphore  one permit of a semaphore of 64 permits, nobody else holding
#   semaphore-shared  the same with 40 other holders of it (the benchmark's
#              shape: its workers share one semaphore)
#   read-lock  a read hold of a read-write lock, nobody else holding
#   fair-lock  a fair lock, nobody waiting
#   rate-limiter      one acquire of a permit of a rate limiter (1 000 000
#              per second: every acquire is admitted), one shared bucket
#   rate-limiter-key  the same with a key of its own per acquire (the
#              benchmark's per-key row: each acquire makes its key's
#              bucket, which expires once full again)
#
# (For the rate limiters a "pair" below is that one acquire, and the
# figure printed is per acquire.)
#
# Two runs per primitive and build, 200 and 1 200 pairs; the difference
# ÷ 1 000 is the instructions per pair, with start-up, the set-up and
# shutdown taken out. Redis runs with `--hz 1`, so that its timer, which
# counts with the run's length rather than its work, stays out of the
# difference. Each build given is measured in turn, every build's runs of
# one primitive before the next primitive's:
#
#   scripts/redis-callgrind.sh [BINARY ...]   # default target/release/latchkey
#
# Instructions do not depend on the machine's load: this compares two
# builds' scripts where the clock on a shared machine cannot.
#
#   PRIMITIVES="semaphore read-lock"   measures those only (default: all)
#   LIBRARIES=DIR   after the service loaded its function libraries, each
#                   DIR/*.lua (a library's code, as `FUNCTION LIST
#                   WITHCODE` shows it) replaces the one of its name: the
#                   service calls it as its own. To price a part of a
#                   script without a build: change it, leave it out, or
#                   write the same Redis calls with no Lua around them.
set -euo pipefail
# A failed run inside $(...) fails the script too.
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
    set -- target/release/latchkey
fi
binaries=()
for b in "$@"; do
    binaries+=("$(realpath "$b")")
done
few=200
many=1200
# valgrind and redis-server, $work, the run's PIDs and free_port.
source scripts/callgrind-common.sh

# Sets up `primitive` and sends `pairs` acquire+release pairs of it over
# one keep-alive connection, once the service answers; every answer is
# checked.
drive() {
    python3 - "$1" "$2" "$3" "$4" <<'EOF'
import glob, http.client, os, socket, subprocess, sys, time
port, primitive, pairs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
redis_port = sys.argv[4]
deadline = time.time() + 120
while True:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        conn.request("GET", "/readyz")
        response = conn.getresponse()
        response.read()
        if response.status == 200:
            break
    except OSError:
        pass
    if time.time() > deadline:
        sys.exit("the service did not become ready")
    time.sleep(0.2)
if os.environ.get("LIBRARIES"):
    for path in sorted(glob.glob(os.path.join(os.environ["LIBRARIES"], "*.lua"))):
        with open(path, "rb") as code:
            loaded = subprocess.run(
                ["redis-cli", "-p", redis_port, "-x", "FUNCTION", "LOAD", "REPLACE"],
                stdin=code, capture_output=True, text=True)
        if not loaded.stdout.startswith("latchkey_"):
            sys.exit(f"loading {path}: {loaded.stdout}{loaded.stderr}")
def ask(method, path, body, want):
    headers = {"Content-Type": "application/json"} if body else {}
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    text = response.read()
    if response.status != want:
        sys.exit(f"{method} {path}: {response.status} {text!r}")
if primitive.startswith("semaphore"):
    conn.request("PUT", "/semaphores/callgrind", body=b'{"permits":64}',
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    if response.status not in (200, 201):
        sys.exit(f"PUT /semaphores/callgrind: {response.status}")
if primitive == "semaphore-shared":
    for other in range(40):
        ask("POST", "/semaphores/callgrind/acquire",
            f'{{"holder":"other-{other}","lease_ms":600000}}'.encode(), 201)
if primitive.startswith("rate-limiter"):
    ask("PUT", "/rate-limiters/callgrind",
        b'{"rate":1000000,"per_ms":1000,"burst":1000}', 200)
    keyed = primitive == "rate-limiter-key"
    for i in range(pairs):
        key = f',"key":"user-{i}"' if keyed else ""
        ask("POST", "/rate-limiters/callgrind/acquire", f'{{"permits":1{key}}}'.encode(), 200)
    conn.close()
    sys.exit(0)
acquire = {
    "lock": ("/locks/callgrind/acquire", "/locks/callgrind/holders/callgrind-1"),
    "semaphore": ("/semaphores/callgrind/acquire", "/semaphores/callgrind/holders/callgrind-1"),
    "semaphore-shared": ("/semaphores/callgrind/acquire", "/semaphores/callgrind/holders/callgrind-1"),
    "read-lock": ("/rwlocks/callgrind/read/acquire", "/rwlocks/callgrind/holders/callgrind-1"),
    "fair-lock": ("/fair-locks/callgrind/acquire", "/fair-locks/callgrind/holders/callgrind-1"),
}[primitive]
for _ in range(pairs):
    ask("POST", acquire[0], b'{"holder":"callgrind-1"}', 201)
    ask("DELETE", acquire[1], None, 200)
conn.close()
EOF
}

# One run: redis-server under callgrind, `binary` in front of it, `pairs`
# pairs of `primitive`; prints Redis's total instructions.
run() {
    local binary=$1 primitive=$2 pairs=$3
    local redis_port port
    redis_port=$(free_port)
    valgrind --tool=callgrind --callgrind-out-file="$work/redis.out" \
        redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
        --hz 1 --dir "$work" >"$work/redis.log" 2>&1 &
    redis_pid=$!
    until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.2; done
    port=$(free_port)
    env -u LATCHKEY_REDLOCK_NODES \
        LATCHKEY_LISTEN="127.0.0.1:$port" \
        LATCHKEY_REDIS_URL="redis://127.0.0.1:$redis_port" \
        "$binary" >"$work/service.log" 2>&1 &
    service_pid=$!
    drive "$port" "$primitive" "$pairs" "$redis_port"
    kill -TERM "$service_pid"
    wait "$service_pid" || true
    service_pid=
    redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
    wait "$redis_pid" || true
    redis_pid=
    sed -n 's/^summary: //p' "$work/redis.out"
}

echo "redis-server: $(redis-server --version)"
for primitive in ${PRIMITIVES:-lock semaphore semaphore-shared read-lock fair-lock}; do
    for binary in "${binaries[@]}"; do
        base=$(run "$binary" "$primitive" $few)
        more=$(run "$binary" "$primitive" $many)
        case "$primitive" in
        rate-limiter*) what="acquire" ;;
        *) what="acquire + release" ;;
        esac
        echo "$primitive: $(( (more - base) / (many - few) )) Redis instructions per $what ($binary)"
    done
done
