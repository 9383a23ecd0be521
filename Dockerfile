# syntax=docker/dockerfile:1
# hookline: one image with the three service binaries (hookline-fanout,
# hookline-dispatcher, hookline-dlq-sink) in /usr/local/bin, running as the
# non-root uid 65532. The Helm chart picks the binary with `command`.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
# rdkafka-sys builds librdkafka from source with ./configure and make; its
# `ssl` feature links the system OpenSSL, zlib comes from zlib1g-dev and zstd
# is built from source by zstd-sys. No cmake and no Cyrus SASL (GSSAPI is off;
# SCRAM and PLAIN need neither).
# Packages follow Debian stable's security updates, so they are not pinned.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential pkg-config libssl-dev zlib1g-dev perl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Cache mounts keep the registry and build artefacts between builds; the
# binaries are copied out of the cached target directory in the same step.
# The image's dlq-sink archives to S3 too: the crate's `s3` feature (off by
# default in the crate, on in `make` as here).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --features hookline-dlq-sink/s3 \
      -p hookline-fanout -p hookline-dispatcher -p hookline-dlq-sink --bins \
 && mkdir -p /out \
 && cp target/release/hookline-fanout target/release/hookline-dispatcher \
       target/release/hookline-dlq-sink /out/

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# libssl3 for librdkafka's TLS, ca-certificates for brokers with public CAs
# (webhook TLS uses the roots compiled into the dispatcher).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 hookline \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin hookline
COPY --from=builder /out/ /usr/local/bin/
USER 65532:65532
# /metrics, /healthz and /readyz.
EXPOSE 9464 9465 9466
ENV HOOKLINE_LOG_FORMAT=json
ENTRYPOINT ["/usr/local/bin/hookline-dispatcher"]
