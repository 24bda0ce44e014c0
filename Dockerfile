# syntax=docker/dockerfile:1
#
# changesink image: one static Go binary on BusyBox (musl): a POSIX shell and the CA bundle, ~27 MB in all.
#
# Build:  docker build --build-arg VERSION=0.1.0 --build-arg COMMIT=$(git rev-parse --short HEAD) \
#           -t ghcr.io/changesink/changesink:0.1.0 .
#
# Kestra runs it with io.kestra.plugin.scripts.shell.Commands and the Docker task runner, which
# clears the image ENTRYPOINT and runs `/bin/sh -c "set -e ..."`: so the image needs /bin/sh and
# the binary on PATH (/usr/local/bin/changesink). The base images are pinned by tag; no digest is
# pinned because no registry could be reached from the machine this was written on (pin one with
# `docker buildx imagetools inspect golang:1.26.8` where you build, if your policy requires it).

ARG GO_IMAGE=golang:1.26.8
ARG BASE_IMAGE=busybox:1.37.0-musl

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Module downloads first, so a source change does not re-download them.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
# The same package `go build ./cmd/changesink` builds; cmd/changesink/ship_test.go checks this
# line (package, CGO_ENABLED=0, -trimpath, ldflags) and that the result is statically linked.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" -o /out/changesink ./cmd/changesink

# Demo data generator for docker-compose.yml's one-shot `demo` service (not part of the
# changesink image; BuildKit builds this stage only when a build targets it).
FROM build AS demo-build
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/changesink-demo ./cmd/changesink-demo

FROM ${BASE_IMAGE} AS demo
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=demo-build /out/changesink-demo /usr/local/bin/changesink-demo
CMD ["changesink-demo", "--help"]

# The changesink image (the default, last stage).
FROM ${BASE_IMAGE} AS changesink
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="changesink" \
      org.opencontainers.image.description="Keep read models current from change streams (Kafka compacted topic -> PostgreSQL, PostgreSQL CDC -> ClickHouse), run from Kestra flows." \
      org.opencontainers.image.source="https://github.com/changesink/changesink" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
# BusyBox gives /bin/sh (Kestra runs `/bin/sh -c`); the CA bundle comes from the Debian-based
# builder (package ca-certificates) to the path Go's crypto/tls reads first, for TLS to Kafka,
# PostgreSQL and ClickHouse. (Alpine would add ~7 MB and push the image past 30 MB.)
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/changesink /usr/local/bin/changesink
# No USER: the image runs as root on purpose. Kestra's Docker task runner copies the working
# directory into the container owned by root:root 0755, so a non-root user could not write
# batch-report.json, expected.jsonl or pending.jsonl (kestra-io/plugin-scripts#411); the shipped
# flows also set the runner's `user: "0"`. The process needs no other privilege.
# No ENTRYPOINT: shell.Commands clears it anyway; `docker run IMAGE` prints the help.
CMD ["changesink", "--help"]
