# syntax=docker/dockerfile:1
#
# latchkey container image.
#
#   docker build -t latchkey:0.1.0 .      (or: buildah bud -t latchkey:0.1.0 .)
#   docker run --rm -p 8080:8080 \
#       -e LATCHKEY_REDIS_URL=redis://my-redis:6379 latchkey:0.1.0
#
# The image does NOT contain redis-server: always point the service at an
# existing Redis with LATCHKEY_REDIS_URL (the Helm chart in helm/latchkey
# enforces this).
#
# No HEALTHCHECK is declared on purpose: the runtime image has no curl/wget,
# and under Kubernetes the kubelet probes the HTTP endpoints directly
# (livenessProbe GET /healthz, readinessProbe GET /readyz, see the chart).

# Builder and runtime must be the same Debian release (bookworm) so the
# binary's glibc requirement matches the runtime image.
ARG RUST_VERSION=1.95

############################################################################
# Stage 1: build the release binary
############################################################################
FROM rust:${RUST_VERSION}-slim-bookworm AS builder

WORKDIR /usr/src/latchkey

# --- Dependency cache layer -------------------------------------------------
# Only the manifest and lockfile are copied, and every target that
# Cargo.toml declares gets a placeholder source file at its path (the
# library, the binary and the [[bench]] target "latchkey-bench"). This
# layer, with all compiled dependencies, is reused until Cargo.toml,
# Cargo.lock or .cargo/config.toml change.
# Afterwards the placeholder crate's own artifacts are deleted so the real
# sources are always rebuilt, whatever the modification times of the copied
# files are.
COPY Cargo.toml Cargo.lock ./
COPY .cargo/ ./.cargo/
RUN mkdir -p src benches/latchkey_bench \
    && echo 'fn main() {}' > src/main.rs \
    && echo '' > src/lib.rs \
    && echo 'fn main() {}' > benches/latchkey_bench/main.rs \
    && cargo build --release --locked --bin latchkey \
    && rm -rf src benches \
    && rm -rf target/release/.fingerprint/latchkey-* \
              target/release/deps/latchkey-* \
              target/release/deps/liblatchkey-* \
              target/release/latchkey*

# --- Real sources -------------------------------------------------------------
COPY src/ ./src/
COPY benches/ ./benches/
COPY openapi/ ./openapi/
# The image's binary is stripped of its debug info (line tables: most of
# its weight) and of every symbol but the functions', so a panic's
# backtrace still names the functions (the data symbols it drops, about
# 20 000 of 46 000, weigh 0.9 MB and name no code). The debug info goes to
# latchkey.debug, which the binary names in its .gnu_debuglink and matches
# by its GNU build ID; the "debuginfo" stage below exports it
# (docs/src/deploying.md).
RUN cargo build --release --locked --bin latchkey \
    && objcopy --only-keep-debug target/release/latchkey latchkey.debug \
    && nm --defined-only target/release/latchkey > symbols \
    && awk '$2 ~ /^[tTwW]$/ { print $3 }' symbols > functions \
    && objcopy --strip-all --keep-symbols=functions \
               --add-gnu-debuglink=latchkey.debug \
               target/release/latchkey /usr/local/bin/latchkey

############################################################################
# Stage 2: the binary's debug info, for symbolizing backtraces and core dumps:
#   docker build --target debuginfo --output type=local,dest=. .
# writes ./latchkey.debug (same build, so from the build cache).
############################################################################
FROM scratch AS debuginfo
COPY --from=builder /usr/src/latchkey/latchkey.debug /

############################################################################
# Stage 3: Debian's CA bundle
############################################################################
# rustls trusts the system's roots for rediss:// (and the client tools for
# an https:// service URL) when no CA file is configured: it reads
# /etc/ssl/certs/ca-certificates.crt (or $SSL_CERT_FILE). Only that bundle
# goes into the runtime image: the ca-certificates package would bring
# OpenSSL along (9 MB), which latchkey does not use.
# Versions are deliberately not pinned: the bookworm security archive
# replaces package versions, so a pin would break the build over time.
FROM debian:bookworm-slim AS certs
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*

############################################################################
# Stage 4: minimal runtime
############################################################################
FROM debian:bookworm-slim AS runtime

LABEL org.opencontainers.image.title="latchkey" \
      org.opencontainers.image.description="Distributed locks over HTTP, backed by Redis" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=certs /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN groupadd --system --gid 10001 latchkey \
    && useradd --system --uid 10001 --gid 10001 \
               --no-create-home --home-dir /nonexistent \
               --shell /usr/sbin/nologin latchkey

COPY --from=builder /usr/local/bin/latchkey /usr/local/bin/latchkey

# Listen on all interfaces inside the container so the port is reachable
# from outside the container/pod.
ENV LATCHKEY_LISTEN=0.0.0.0:8080

EXPOSE 8080

# Numeric UID:GID so Kubernetes' runAsNonRoot check can verify it.
USER 10001:10001

# On SIGTERM (Docker's and Kubernetes' default stop signal) the service
# shuts down within LATCHKEY_SHUTDOWN_GRACE_MS (default 10 s); keep the
# orchestrator's stop timeout above that (the chart uses 30 s).
ENTRYPOINT ["/usr/local/bin/latchkey"]
