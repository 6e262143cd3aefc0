#!/usr/bin/env bash
# Builds the container image from the Dockerfile and runs it as a pod
# would (docs/src/ci.md, "What CI checks"). There is no Docker engine and no image
# registry here, so:
#
#  1. The two base images the Dockerfile names are made locally: the
#     runtime's debian:bookworm-slim from debootstrap (minbase, slimmed as
#     Debian's own slim images are), and the builder's
#     rust:<RUST_VERSION>-slim-bookworm from that plus what the official
#     image adds: gcc, libc6-dev, ca-certificates and the Rust toolchain,
#     here this machine's (it must be the Dockerfile's RUST_VERSION), with
#     this machine's CA bundle (crate downloads may pass a TLS-intercepting
#     proxy). Both are kept in local storage under a tag derived from
#     their inputs, so a rerun reuses them.
#  2. buildah builds the Dockerfile (--layers: the dependency layer is
#     reused while Cargo.toml, Cargo.lock and .cargo/ are unchanged; cargo's
#     registry lives in a cache directory mounted into the build), tags it
#     as the chart's default values name it (image.repository, tag = the
#     chart's appVersion), and exports the binary's separate debug file.
#  3. The image's entrypoint runs with the image's user, environment,
#     working directory and EXPOSEd port, in a network namespace of its own
#     (like a pod: its port is its own; a redis-server started by this
#     script listens on that namespace's loopback), its own PID namespace
#     (latchkey is PID 1, as in a container), the root file system mounted
#     read-only with a tmpfs at /tmp (what the chart sets and mounts), and
#     the checks below run against it, one line each.
#
# Everything it starts is stopped by PID, and every container, mount and
# network namespace it made is removed by the name it got, however it
# ends. Logs and the debug file are kept in
# target/check-image/. LATCHKEY_IMAGE_CACHE (default
# /var/cache/latchkey-image) holds cargo's registry between runs.
# shellcheck disable=SC2015 # `A && B || die`: die when either fails
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "check-image: $*"; }
ok() { echo "check-image: ok: $*"; }
die() {
  echo "check-image: FAILED: $*" >&2
  exit 1
}

scripts/ensure-package.sh buildah buildah
scripts/ensure-package.sh debootstrap debootstrap
scripts/ensure-redis.sh
scripts/ensure-package.sh openssl openssl
scripts/ensure-package.sh curl curl
scripts/ensure-package.sh ip iproute2
scripts/ensure-package.sh readelf binutils
# buildah's default isolation (an OCI runtime) does not work on these
# machines (crun refuses: cgroups in hybrid mode); chroot isolation does.
export BUILDAH_ISOLATION=chroot

started=$SECONDS
target_dir=${CARGO_TARGET_DIR:-target}
out=$target_dir/check-image
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
cache=${LATCHKEY_IMAGE_CACHE:-/var/cache/latchkey-image}
mkdir -p "$cache/cargo-registry"
# An image storage of its own (the bases, the layer cache, the image), so
# that pruning it touches nobody else's images; list it with
# `buildah --root /var/cache/latchkey-image/storage images`.
storage=$cache/storage
buildah() { command buildah --root "$storage" --runroot /run/latchkey-image "$@"; }
# One run at a time on a machine (they share the storage); what a run that
# was killed left behind in it goes: its containers, its network namespace.
exec 9>"$cache/lock"
if ! flock -n 9; then
  say "waiting for another run of scripts/check-image.sh to end"
  flock 9
fi
buildah rm --all >/dev/null
for ns in $(ip netns list | sed -n 's/^\(latchkey-check-image-[0-9]*\).*/\1/p'); do
  ip netns delete "$ns"
done
work=$(mktemp -d /var/tmp/latchkey-check-image.XXXXXX)
chmod 755 "$work" # apt's downloads run as _apt

# What this run made, removed on exit by the PID, name or ID it got.
pids=()
containers=()
netns=""
cleanup() {
  set +e
  local pid c
  for pid in "${pids[@]}"; do
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  for c in "${containers[@]}"; do
    buildah umount "$c" >/dev/null 2>&1
    buildah rm "$c" >/dev/null 2>&1
  done
  if [ -n "$netns" ]; then
    ip netns delete "$netns" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT

new_container() { # new_container IMAGE: a container of IMAGE, named in $ctr
  ctr="latchkey-check-$$-${#containers[@]}"
  containers+=("$ctr")
  buildah from --pull=never --name "$ctr" "$1" >/dev/null
}

# Runs a logged step; on failure, shows the end of its log.
logged() { # logged LOG COMMAND...
  local log=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "$* (log: $log)"
  fi
}

############################################################################
# What the Dockerfile names, and the toolchain that can stand in for it
############################################################################
rust_version=$(sed -n 's/^ARG RUST_VERSION=\([0-9.]*\)$/\1/p' Dockerfile)
[ -n "$rust_version" ] || die "the Dockerfile has no 'ARG RUST_VERSION=<version>' line"
suite=bookworm
builder_ref=docker.io/library/rust:$rust_version-slim-$suite
runtime_ref=docker.io/library/debian:$suite-slim
grep -qx "FROM rust:\${RUST_VERSION}-slim-$suite AS builder" Dockerfile &&
  grep -qx "FROM debian:$suite-slim AS runtime" Dockerfile ||
  die "the Dockerfile's base images are no longer rust:\${RUST_VERSION}-slim-$suite and debian:$suite-slim; teach scripts/check-image.sh to make the new ones"

rustc_info=$(rustc -vV)
local_version=$(sed -n 's/^release: //p' <<<"$rustc_info")
rust_host=$(sed -n 's/^host: //p' <<<"$rustc_info")
case $local_version in
  "$rust_version" | "$rust_version".*) ;;
  *) die "the Dockerfile builds with Rust $rust_version (ARG RUST_VERSION), but this machine's toolchain is $local_version: the stand-in builder image would not be what the Dockerfile names; make them agree" ;;
esac
sysroot=$(rustc --print sysroot)

# The image's name: what the chart's default values run.
chart_repo=$(sed -n '/^image:/,/^[^ ]/s/^  repository: *//p' helm/latchkey/values.yaml)
app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' helm/latchkey/Chart.yaml)
[ -n "$chart_repo" ] && [ -n "$app_version" ] ||
  die "cannot read image.repository from helm/latchkey/values.yaml or appVersion from helm/latchkey/Chart.yaml"
image=$chart_repo:$app_version

# The Debian mirror(s) this machine's apt uses, for the suite and its
# updates and security suites.
apt_targets() {
  # shellcheck disable=SC2016 # apt's own $(FIELD) syntax
  apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Created-By: Packages' |
    sed 's|/ | |' | sort -u
}
targets=$(apt_targets)
if [ -z "$targets" ]; then
  apt-get update -qq
  targets=$(apt_targets)
fi
mirror=$(awk -v s="$suite" '$2 == s { print $1; exit }' <<<"$targets")
[ -n "$mirror" ] || die "this machine's apt has no source for Debian $suite (/etc/apt/sources.list*)"
sources=$(awk -v s="$suite" '$2 == s || $2 == s "-updates" || $2 == s "-security" {
    suites[$1] = suites[$1] (suites[$1] == "" ? "" : " ") $2
  }
  END {
    for (uri in suites) {
      printf "Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n", uri, suites[uri]
    }
  }' <<<"$targets")

############################################################################
# The runtime base: debian:bookworm-slim
############################################################################
# Debian's slim images are debootstrap's minbase with what
# debuerreotype-minimizing-config and debuerreotype-slimify do: no
# documentation (but copyright files), manuals, info or translations, now
# or from later installs, apt's caches and lists emptied, services never
# started by packages.
slimify() { # slimify ROOTFS
  local r=$1
  cat >"$r/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# The "slim" variant of the Debian base image: no documentation but the
# copyright files, no manuals, info pages or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
  find "$r/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$r"/usr/share/{groff,info,linda,locale,man}/* "$r"/usr/share/lintian/overrides/*
  cat >"$r/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$r/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Acquire::GzipIndexes "true";' >"$r/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$r/etc/apt/apt.conf.d/docker-autoremove-suggests"
  printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
  chmod 755 "$r/usr/sbin/policy-rc.d"
  rm -f "$r/etc/apt/sources.list"
  printf '%s' "$sources" >"$r/etc/apt/sources.list.d/debian.sources"
  rm -rf "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb "${r:?}"/var/lib/apt/lists/* "${r:?}"/dev/*
  mkdir -p "$r/var/lib/apt/lists/partial"
  find "$r/var/log" -type f -delete
  # The container runtime provides these.
  : >"$r/etc/resolv.conf"
  : >"$r/etc/hostname"
}

make_runtime_base() { # make_runtime_base TAG
  local rootfs=$work/rootfs mnt
  logged "$out/debootstrap.log" debootstrap --variant=minbase "$suite" "$rootfs" "$mirror"
  slimify "$rootfs"
  new_container scratch
  mnt=$(buildah mount "$ctr")
  tar -C "$rootfs" -cf - . | tar -C "$mnt" -xpf -
  buildah umount "$ctr" >/dev/null
  rm -rf "$rootfs"
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd '["bash"]' "$ctr"
  buildah commit --quiet "$ctr" "$1" >/dev/null
}

############################################################################
# The builder base: rust:<RUST_VERSION>-slim-bookworm
############################################################################
make_builder_base() { # make_builder_base TAG
  local mnt toolchain=$local_version-$rust_host bin
  new_container "$runtime_base"
  # What the official rust:*-slim-bookworm images install.
  logged "$out/builder-apt.log" buildah run "$ctr" -- sh -c \
    'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates gcc libc6-dev && rm -rf /var/lib/apt/lists/*'
  mnt=$(buildah mount "$ctr")
  # The toolchain (without its documentation), where the official image
  # keeps it, and cargo's bin directory on PATH as there.
  mkdir -p "$mnt/usr/local/rustup/toolchains/$toolchain" "$mnt/usr/local/cargo/bin"
  cp -a "$sysroot"/bin "$sysroot"/lib "$sysroot"/libexec "$mnt/usr/local/rustup/toolchains/$toolchain/"
  for bin in "$mnt/usr/local/rustup/toolchains/$toolchain"/bin/*; do
    ln -s "../../rustup/toolchains/$toolchain/bin/${bin##*/}" "$mnt/usr/local/cargo/bin/${bin##*/}"
  done
  # This machine's CA bundle: crates.io may be reached through a
  # TLS-intercepting proxy whose CA only this bundle has.
  cp /etc/ssl/certs/ca-certificates.crt "$mnt/etc/ssl/certs/ca-certificates.crt"
  buildah umount "$ctr" >/dev/null
  buildah config --env RUSTUP_HOME=/usr/local/rustup --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env RUST_VERSION="$local_version" "$ctr"
  buildah commit --quiet "$ctr" "$1" >/dev/null
}

# Each base is kept under a tag derived from its inputs (the recipe above,
# the mirror and its current Release file, debootstrap's version; for the
# builder also the toolchain and the CA bundle), then tagged as the name
# the Dockerfile uses.
have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }
key() { sha256sum | cut -c1-16; }

release=$work/InRelease
/usr/lib/apt/apt-helper download-file "$mirror/dists/$suite/InRelease" "$release" >/dev/null 2>&1 ||
  die "cannot fetch $mirror/dists/$suite/InRelease"
runtime_key=$({
  declare -f slimify make_runtime_base
  echo "$sources"
  dpkg-query -W debootstrap
  sha256sum <"$release"
} | key)
runtime_base=localhost/latchkey-check/debian:$suite-slim-$runtime_key
if have_image "$runtime_base"; then
  ok "runtime base $runtime_ref: reused ($runtime_base)"
else
  t=$SECONDS
  make_runtime_base "$runtime_base"
  ok "runtime base $runtime_ref: made by debootstrap from $mirror in $((SECONDS - t)) s"
fi
buildah tag "$runtime_base" "$runtime_ref"

builder_key=$({
  echo "$runtime_key"
  declare -f make_builder_base
  echo "$rustc_info"
  cargo -V
  sha256sum </etc/ssl/certs/ca-certificates.crt
} | key)
builder_base=localhost/latchkey-check/rust:$rust_version-slim-$suite-$builder_key
if have_image "$builder_base"; then
  ok "builder base $builder_ref: reused ($builder_base)"
else
  t=$SECONDS
  make_builder_base "$builder_base"
  ok "builder base $builder_ref: made with Rust $local_version in $((SECONDS - t)) s"
fi
buildah tag "$builder_base" "$builder_ref"

############################################################################
# The image
############################################################################
# Every build shares the layer cache, and cargo's registry (a volume: not
# part of any layer). The volume's mount point is left behind, empty, in
# every stage's image, /usr/local/cargo/registry in the runtime's too: an
# image built without it (as operators do) has no such directory.
build() { # build LOG ARGS...
  local log=$1
  shift
  logged "$log" buildah bud --layers --force-rm --pull=never \
    --volume "$cache/cargo-registry:/usr/local/cargo/registry" "$@" .
}
t=$SECONDS
build "$out/build.log" --tag "$image"
ok "built $image from the Dockerfile in $((SECONDS - t)) s (log: $out/build.log)"
# The debug file (the debuginfo stage; the same build, from the cache),
# and tags on the builder and certs stages: their layers are the next
# build's cache.
build "$out/debuginfo.log" --target debuginfo --output "type=local,dest=$out/debug"
build "$out/builder.log" --target builder --tag localhost/latchkey-check/builder:latest
build "$out/certs.log" --target certs --tag localhost/latchkey-check/certs:latest
# What no tag keeps any more (earlier builds' layers, bases made from
# other inputs) is removed: everything in this storage is this script's.
for old in $(buildah images --format '{{.Name}}:{{.Tag}}' | grep -E '^localhost/latchkey-check/(debian|rust):' || true); do
  if [ "$old" != "$runtime_base" ] && [ "$old" != "$builder_base" ]; then
    buildah rmi "$old" >/dev/null
  fi
done
for _ in $(seq 1 20); do
  [ -n "$(buildah rmi --prune 2>/dev/null)" ] || break
done
say "build storage $storage: $(du -sh "$storage" | cut -f1), cargo registry: $(du -sh "$cache/cargo-registry" | cut -f1)"

# The dependency layer holds every dependency: the build of the real
# sources compiles latchkey alone (or is itself reused from the cache).
real_step=$(awk '/^\[[0-9]+\/[0-9]+\] STEP [0-9]+\/[0-9]+: RUN cargo build/ { on = 1; next } /^\[[0-9]+\/[0-9]+\] STEP/ { on = 0 } on' "$out/build.log")
compiled=$(sed -n 's/^ *Compiling \([^ ]*\) .*/\1/p' <<<"$real_step" | sort -u | tr '\n' ' ')
case $compiled in
  "") ok "dependency layer: the build of the real sources was reused from the cache" ;;
  "latchkey ") ok "dependency layer: the build of the real sources compiled latchkey alone" ;;
  *) die "the build of the real sources compiled more than latchkey: $compiled(the Dockerfile's dependency layer misses something)" ;;
esac

############################################################################
# The image as a pod runs it
############################################################################
config() { buildah inspect --type image --format "{{$1}}" "$image"; }
user=$(config .OCIv1.Config.User)
workdir=$(config .OCIv1.Config.WorkingDir)
mapfile -t image_env < <(config 'range .OCIv1.Config.Env}}{{println .}}{{end')
mapfile -t entrypoint < <(config 'range .OCIv1.Config.Entrypoint}}{{println .}}{{end')
mapfile -t ports < <(config '.OCIv1.Config.ExposedPorts' | grep -o '[0-9]*/tcp' | cut -d/ -f1)
[ "${#ports[@]}" -eq 1 ] || die "the image should EXPOSE one TCP port, not: ${ports[*]}"
port=${ports[0]}
case $user in
  "" | 0 | 0:* | root | root:*) die "the image runs as root (USER '$user')" ;;
esac
[[ $user =~ ^[0-9]+:[0-9]+$ ]] ||
  die "the image's USER '$user' is not a numeric UID:GID (Kubernetes' runAsNonRoot can check only a number)"
ok "image config: USER $user, ENTRYPOINT ${entrypoint[*]}, EXPOSE $port/tcp, ENV ${image_env[*]}"

new_container "$image"
service_ctr=$ctr
service_root=$(buildah mount "$service_ctr")
image_root=$service_root
# Mount points for what the chart mounts besides /tmp: the Redis TLS
# files (redis.tls.mountPath). A kubelet's runtime makes them the same way.
tls_mount=$(sed -n '/^  tls:/,/^[^ ]/s/^    mountPath: *//p' helm/latchkey/values.yaml)
[ -n "$tls_mount" ] || die "cannot read redis.tls.mountPath from helm/latchkey/values.yaml"
mkdir -p "$service_root$tls_mount"

netns=latchkey-check-image-$$
ip netns add "$netns"
ip netns exec "$netns" ip link set lo up
# (Background commands call ip directly, so that $! is the command's PID:
# ip netns exec execs it.)
in_ns() { ip netns exec "$netns" "$@"; }

# The sandbox: runs in the network namespace, in new mount and PID
# namespaces; mounts the container's root read-only, a tmpfs at /tmp (the
# chart's emptyDir), /proc and a small /dev, and the --bind files
# read-only; then becomes the user and runs the command with exactly the
# given environment, from the working directory.
# shellcheck disable=SC2016 # expanded by the sandbox's own shell
sandbox_script='
set -euo pipefail
src=$1 root=$2 user=$3 workdir=$4
shift 4
mount --bind "$src" "$root"
mount -o remount,bind,ro "$root"
while [ "$1" = --bind ]; do
  mount --bind "$2" "$root$3"
  mount -o remount,bind,ro "$root$3"
  shift 3
done
mount -t tmpfs -o nosuid,nodev,mode=1777,size=64m tmpfs "$root/tmp"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o nosuid,mode=755,size=1m tmpfs "$root/dev"
for d in null zero full random urandom tty; do
  touch "$root/dev/$d"
  mount --bind "/dev/$d" "$root/dev/$d"
done
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
exec chroot --userspec="$user" "$root" /usr/bin/env -i -C "${workdir:-/}" "$@"
'
sandboxes=0
# in_image [--bind SRC DST]... [VAR=VALUE]... -- COMMAND...: runs in the
# image's container, as above, with the image's environment plus the
# variables. In the background; $sandbox is the PID of the namespaces'
# keeper (killing it kills the command), $sandbox_log its output.
in_image() {
  local binds=() env=("${image_env[@]}")
  while [ "$1" = --bind ]; do
    binds+=("$1" "$2" "$3")
    shift 3
  done
  while [ "$1" != -- ]; do
    env+=("$1")
    shift
  done
  shift
  sandboxes=$((sandboxes + 1))
  mkdir -p "$work/root-$sandboxes"
  sandbox_log=$out/sandbox-$sandboxes.log
  ip netns exec "$netns" unshare --mount --propagation private --pid --fork --kill-child \
    bash -c "$sandbox_script" sandbox "$image_root" "$work/root-$sandboxes" "$user" "$workdir" \
    "${binds[@]}" "${env[@]}" "$@" </dev/null >"$sandbox_log" 2>&1 &
  sandbox=$!
  pids+=("$sandbox")
}
# The PID (outside) of the sandbox's command: the keeper's descendant that
# is PID 1 in its own PID namespace.
pid_one() { # pid_one KEEPER
  local pid=$1 children nspid
  for _ in $(seq 1 100); do
    children=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null || true)
    if [ -n "$children" ]; then
      pid=${children%% *}
      nspid=$(sed -n 's/^NSpid:\t//p' "/proc/$pid/status" 2>/dev/null || true)
      case $nspid in
        *[0-9]$'\t'1) echo "$pid" && return ;;
      esac
    else
      sleep 0.05
    fi
  done
  die "the sandbox did not start its command (log: $sandbox_log)"
}
# Waits for the sandbox to end; its exit status in $status.
wait_sandbox() { # wait_sandbox KEEPER
  status=0
  wait "$1" || status=$?
}

redis_port=6390
ip netns exec "$netns" redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
  >"$out/redis.log" 2>&1 &
pids+=("$!")
redis_url=redis://127.0.0.1:$redis_port
base=http://127.0.0.1:$port
# curl from inside the namespace, as a kubelet's probe or a client in the
# cluster reaches the pod: prints the status code, the body in $body_file.
body_file=$work/body
http() { # http METHOD PATH [JSON]
  local args=(-sS -o "$body_file" -w '%{http_code}' -X "$1" "$base$2")
  if [ $# -gt 2 ]; then
    args+=(-H 'Content-Type: application/json' -d "$3")
  fi
  in_ns curl "${args[@]}" 2>>"$out/curl.log" || true
}
wait_ready() { # wait_ready WHAT: /readyz 200 within 30 s, or fail
  local code=""
  for _ in $(seq 1 300); do
    code=$(http GET /readyz)
    [ "$code" = 200 ] && return
    kill -0 "$sandbox" 2>/dev/null || die "$1 exited before it was ready; its log: $(cat "$sandbox_log")"
    sleep 0.1
  done
  die "$1: /readyz answers $code, not 200, after 30 s; body: $(cat "$body_file"); log: $sandbox_log"
}
expect() { # expect CODE WHAT METHOD PATH [JSON]
  local want=$1 what=$2 code
  shift 2
  code=$(http "$@")
  [ "$code" = "$want" ] || die "$what: $1 $2 answered $code, not $want: $(cat "$body_file")"
}
body_has() { grep -q -- "$1" "$body_file"; }

in_image "LATCHKEY_REDIS_URL=$redis_url" -- "${entrypoint[@]}"
service=$sandbox
wait_ready "the service"
service_pid=$(pid_one "$service")
ok "/readyz 200 from the image's entrypoint against redis-server (its EXPOSEd port $port)"

# Who it runs as: the process's real, effective, saved and file-system ids.
uids=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$service_pid/status")
gids=$(awk '/^Gid:/ { print $2, $3, $4, $5 }' "/proc/$service_pid/status")
want_uid=${user%%:*}
want_gid=${user#*:}
[ "$uids" = "$want_uid $want_uid $want_uid $want_uid" ] && [ "$gids" = "$want_gid $want_gid $want_gid $want_gid" ] ||
  die "the service runs as uids $uids, gids $gids, not $user"
[ "$want_uid" != 0 ] || die "the service runs as root"
ok "the service runs as uid $want_uid, gid $want_gid (not root), PID 1 of its namespace"

expect 201 "lock acquire" POST /locks/image-check/acquire '{"holder":"image-check"}'
body_has '"fencing_token"' || die "the grant has no fencing_token: $(cat "$body_file")"
expect 200 "lock release" DELETE /locks/image-check/holders/image-check
body_has '"released":true' || die "the release did not free the lock: $(cat "$body_file")"
ok "a lock acquired (201) and released (200)"

expect 200 "Swagger UI" GET /docs/
body_has 'swagger' || die "/docs/ is not Swagger UI"
# Every file the page loads is there, not empty (the files it never loads
# are left out of the binary: .cargo/config.toml).
assets=$(grep -o '\(src\|href\)="[^"]*"' "$body_file" | sed 's/^[a-z]*="\(\.\/\)\{0,1\}//; s/"$//')
for asset in $assets; do
  expect 200 "Swagger UI's $asset" GET "/docs/$asset"
  [ -s "$body_file" ] || die "/docs/$asset is empty"
done
expect 200 "the OpenAPI document" GET /openapi.json
ok "/docs serves Swagger UI and what its page loads ($(tr "\n" " " <<<"$assets" | sed "s/ $//")), /openapi.json the document"
expect 200 "metrics" GET /metrics
body_has '^latchkey_http_requests_total' || die "/metrics has no latchkey_http_requests_total"
ok "/metrics serves latchkey's metrics"

# The client tools, from the image, against the service.
in_image "LATCHKEY_URL=$base" -- "${entrypoint[@]}" lock image-cli -- true
wait_sandbox "$sandbox"
[ "$status" = 0 ] || die "latchkey lock image-cli -- true exited $status: $(cat "$sandbox_log")"
expect 200 "lock state" GET /locks/image-cli
body_has '"locked":false' && ! body_has '"fencing_token":0' ||
  die "the lock the CLI took is not released, or was never taken: $(cat "$body_file")"
ok "latchkey lock image-cli -- true, run from the image, took the lock and released it"

# The chart's default preStop hook (preStop.action exec) runs /bin/sleep
# in the container.
in_image -- /bin/sleep 0
wait_sandbox "$sandbox"
[ "$status" = 0 ] || die "/bin/sleep, the chart's preStop command, does not run in the image: $(cat "$sandbox_log")"
ok "the chart's preStop command /bin/sleep runs in the image"

# The tag the chart runs is the binary's version.
in_image -- "${entrypoint[@]}" --version
wait_sandbox "$sandbox"
[ "$status" = 0 ] && [ "$(cat "$sandbox_log")" = "latchkey $app_version" ] ||
  die "the image tagged $app_version (the chart's appVersion) runs: $(cat "$sandbox_log")"
ok "the image tagged $app_version runs latchkey $app_version"

# Nothing outside /tmp may be written: the root file system is read-only,
# as the chart's readOnlyRootFilesystem makes it, and /tmp is the chart's
# emptyDir.
if grep -qi 'read-only file system\|os error 30' "$out"/sandbox-*.log; then
  die "something tried to write to the read-only root: $(grep -i 'read-only file system\|os error 30' "$out"/sandbox-*.log)"
fi
tmp_files=$(find "/proc/$service_pid/root/tmp" -mindepth 1 | sed "s|^/proc/$service_pid/root||")
ok "served with the root file system read-only; nothing written in /tmp either${tmp_files:+ but: $tmp_files}"

# SIGTERM with a long-poll open: the poll ends 503 shutting-down and the
# process exits, within the grace.
grace_ms=10000 # LATCHKEY_SHUTDOWN_GRACE_MS's default (docs/src/configuration.md)
for e in "${image_env[@]}"; do
  case $e in LATCHKEY_SHUTDOWN_GRACE_MS=*) grace_ms=${e#*=} ;; esac
done
expect 201 "lock acquire" POST /locks/image-term/acquire '{"holder":"a"}'
ip netns exec "$netns" curl -sS -o "$work/poll-body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -d '{"holder":"b","wait_ms":30000}' "$base/locks/image-term/acquire" >"$work/poll-code" 2>&1 &
poll=$!
pids+=("$poll")
for _ in $(seq 1 100); do
  http GET /locks/image-term >/dev/null
  body_has '"waiters":1' && break
  sleep 0.05
done
body_has '"waiters":1' || die "the long-poll is not waiting: $(cat "$body_file")"
term_start=$(date +%s%N)
kill -TERM "$service_pid"
wait "$poll" || true
poll_ms=$((($(date +%s%N) - term_start) / 1000000))
[ "$(cat "$work/poll-code")" = 503 ] && grep -q '/problems/shutting-down' "$work/poll-body" ||
  die "the open long-poll ended $(cat "$work/poll-code"), not 503 shutting-down: $(cat "$work/poll-body")"
wait_sandbox "$service"
exit_ms=$((($(date +%s%N) - term_start) / 1000000))
[ "$status" = 0 ] || die "after SIGTERM the service exited $status, not 0: $(tail -5 "$sandbox_log")"
[ "$exit_ms" -le "$grace_ms" ] ||
  die "after SIGTERM the service took $exit_ms ms to exit, beyond its grace of $grace_ms ms"
ok "SIGTERM: the open long-poll ended 503 shutting-down after $poll_ms ms, the process exited 0 after $exit_ms ms (grace $grace_ms ms)"

############################################################################
# rediss:// from the image
############################################################################
pki=$work/pki
mkdir -p "$pki"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
(
  cd "$pki"
  openssl req -x509 -new -days 2 "${ec[@]}" -keyout ca.key -out ca.crt \
    -subj "/CN=latchkey image check CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
  openssl req -new "${ec[@]}" -keyout server.key -out server.csr -subj "/CN=latchkey image check redis"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n' >server.ext
  openssl x509 -req -days 2 -in server.csr -CA ca.crt -CAkey ca.key -set_serial 1 \
    -extfile server.ext -out server.crt
) >"$out/openssl.log" 2>&1 || die "openssl could not make the test certificates: $(cat "$out/openssl.log")"
tls_port=6391
ip netns exec "$netns" redis-server --port 0 --tls-port "$tls_port" --bind 127.0.0.1 --save "" --appendonly no \
  --tls-cert-file "$pki/server.crt" --tls-key-file "$pki/server.key" \
  --tls-ca-cert-file "$pki/ca.crt" --tls-auth-clients no >"$out/redis-tls.log" 2>&1 &
pids+=("$!")
tls_url=rediss://127.0.0.1:$tls_port

stop_service() { # SIGTERM to the sandbox's command, then wait for it
  kill -TERM "$(pid_one "$sandbox")"
  wait_sandbox "$sandbox"
}
over_tls() { # over_tls WHAT: ready, and a lock taken and given back
  wait_ready "$1"
  expect 201 "$1: lock acquire" POST /locks/image-tls/acquire '{"holder":"tls"}'
  expect 200 "$1: lock release" DELETE /locks/image-tls/holders/tls
  stop_service
}

# The image alone does not trust a private CA...
in_image "LATCHKEY_REDIS_URL=$tls_url" -- "${entrypoint[@]}"
code=""
for _ in $(seq 1 100); do
  code=$(http GET /readyz)
  [ "$code" = 503 ] && break
  sleep 0.1
done
[ "$code" = 503 ] && body_has backend-unavailable ||
  die "with a CA the image does not know, /readyz answered $code: $(cat "$body_file")"
stop_service
ok "rediss:// to a server whose CA the image does not know: /readyz 503 backend-unavailable"

# ...an operator gives it the CA as the chart does (redis.tls.existingSecret:
# the Secret's ca.crt mounted read-only at redis.tls.mountPath, and
# LATCHKEY_REDIS_TLS_CA_FILE naming it)...
touch "$service_root$tls_mount/ca.crt"
in_image --bind "$pki/ca.crt" "$tls_mount/ca.crt" \
  "LATCHKEY_REDIS_URL=$tls_url" "LATCHKEY_REDIS_TLS_CA_FILE=$tls_mount/ca.crt" -- "${entrypoint[@]}"
over_tls "rediss:// with the chart's CA file"
ok "rediss:// with the CA mounted as the chart mounts it (LATCHKEY_REDIS_TLS_CA_FILE=$tls_mount/ca.crt): ready, a lock acquired and released"

# ...or adds it to the image's own bundle, which latchkey trusts when no
# CA file is set: the bundle with the CA appended, mounted over
# /etc/ssl/certs/ca-certificates.crt (e.g. a ConfigMap with subPath; a
# derived image can COPY it there instead).
cat "$service_root/etc/ssl/certs/ca-certificates.crt" "$pki/ca.crt" >"$pki/bundle.crt"
in_image --bind "$pki/bundle.crt" /etc/ssl/certs/ca-certificates.crt \
  "LATCHKEY_REDIS_URL=$tls_url" -- "${entrypoint[@]}"
over_tls "rediss:// with the CA in the image's bundle"
ok "rediss:// with the CA added to the image's CA bundle (/etc/ssl/certs/ca-certificates.crt): ready, a lock acquired and released"

############################################################################
# Size, and the debug file
############################################################################
layers_size() { # layers_size IMAGE: its layers' bytes, uncompressed
  buildah inspect --type image --format '{{.Manifest}}' "$1" |
    python3 -c 'import json, sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))'
}
image_bytes=$(layers_size "$image")
base_bytes=$(layers_size "$runtime_base")
added=$((image_bytes - base_bytes))
# The published debian:bookworm-slim (amd64) weighs about 75 MB
# uncompressed, as `docker images` shows it (74.8 MB). A constant: the
# real image cannot be pulled here, and the stand-in is not byte for byte
# the same.
published_base=75000000
limit=100000000
projected=$((published_base + added))
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
binary=$service_root/usr/local/bin/latchkey
say "image $image: $(mb "$image_bytes") here: the stand-in base $(mb "$base_bytes") and $(mb "$added") added, of which the binary $(mb "$(stat -c %s "$binary")")"
[ "$projected" -lt "$limit" ] ||
  die "on the real debian:bookworm-slim the image would be $(mb "$projected"), not under $(mb "$limit")"
ok "on the real debian:bookworm-slim ($(mb "$published_base")) the image is $(mb "$projected"), under $(mb "$limit")"

debug_file=$out/debug/latchkey.debug
[ -f "$debug_file" ] || die "the debuginfo stage made no latchkey.debug"
build_id() { readelf -n "$1" 2>/dev/null | sed -n 's/^ *Build ID: //p'; }
# (.debug_gdb_scripts, a loaded section naming gdb's pretty-printers, stays.)
readelf -SW "$binary" >"$work/sections"
if grep -Eq '\.debug_(info|line|str|abbrev|aranges|ranges|rnglists|loclists|loc) ' "$work/sections"; then
  die "the image's binary still has debug sections"
fi
[ -n "$(build_id "$binary")" ] && [ "$(build_id "$binary")" = "$(build_id "$debug_file")" ] ||
  die "latchkey.debug's build ID is not the image binary's"
readelf --string-dump=.gnu_debuglink "$binary" >"$work/debuglink"
grep -q 'latchkey\.debug' "$work/debuglink" ||
  die "the image's binary has no .gnu_debuglink to latchkey.debug"
main_addr=$(nm "$binary" | awk '$2 ~ /^[tT]$/ && $3 ~ /^_ZN8latchkey4main17h[0-9a-f]+E$/ && !found++ { print $1 }')
[ -n "$main_addr" ] || die "the image's binary has no latchkey::main symbol"
where=$(addr2line -e "$debug_file" -f -C "0x$main_addr" | tr '\n' ' ')
case $where in
  *src/main.rs:[0-9]*) ;;
  *) die "latchkey.debug does not map the binary's main (0x$main_addr) to src/main.rs: $where" ;;
esac
ok "the image's binary has no debug info; latchkey.debug ($(mb "$(stat -c %s "$debug_file")"), same build ID) symbolizes it: 0x$main_addr is $where"

say "all checks passed in $((SECONDS - started)) s; the debug file is $debug_file"
