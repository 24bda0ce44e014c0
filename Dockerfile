#
# changesink image: one static Go binary on BusyBox: a POSIX shell and the CA bundle, under 30 MB in all.
#
# Build:  docker build --build-arg VERSION=0.1.0 --build-arg COMMIT=$(git rev-parse --short=12 HEAD) \
#           -t ghcr.io/changesink/changesink:0.1.0 .
#
# Kestra runs it with io.kestra.plugin.scripts.shell.Commands and the Docker task runner, which
# clears the image ENTRYPOINT and runs `/bin/sh -c "set -e ..."`: so the image needs /bin/sh and
# the binary on PATH (/usr/local/bin/changesink). The base images are build args, pinned by tag;
# no digest is pinned because no registry could be reached from the machine this was written on
# (pin one with `docker buildx imagetools inspect golang:1.26.8` where you build, if your policy
# requires it). .ci/docker builds this file with the legacy builder (DOCKER_BUILDKIT=0) and base
# images it makes locally from Debian packages and the machine's Go (GO_IMAGE, BASE_IMAGE).
#
# The stages are ordered for the build cache (the legacy builder has no cache mounts), so that:
# - a source change does not download the modules again, nor recompile them (the dependency
#   packages are compiled in a layer keyed by the list of packages the commands import);
# - a new VERSION or COMMIT alone only relinks (the ARGs are declared after the compile, and the
#   stamped link reuses the compile layer's build cache).

ARG GO_IMAGE=golang:1.26.8
ARG BASE_IMAGE=busybox:1.37.0-musl

# Modules: go.mod and go.sum only, so this layer lasts until they change.
FROM ${GO_IMAGE} AS modules
# The builder's Go proxy and checksum database, when the host's differ from Go's defaults.
ARG GOPROXY
ARG GOSUMDB
ENV CGO_ENABLED=0
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download

# The non-project packages (the standard library and the modules) both commands import. This
# stage runs on every source change, but its output changes only when the import set does.
FROM modules AS imports
COPY . .
RUN go list -deps -f '{{if not (and .Module .Module.Main)}}{{.ImportPath}}{{end}}' \
      ./cmd/changesink ./cmd/changesink-demo >/imports.txt

# Compile: the dependencies first (cached while the import set stays), then the project. The
# flags are the stamped build's (-trimpath, CGO_ENABLED=0), so that build finds every package
# compiled; the links here only fill the cache (their output is discarded).
FROM modules AS compile
COPY --from=imports /imports.txt /imports.txt
RUN go build -trimpath $(cat /imports.txt)
COPY . .
RUN go build -trimpath -o /tmp/ ./cmd/changesink ./cmd/changesink-demo && rm -f /tmp/changesink /tmp/changesink-demo

# The stamped binary: only the link runs again when VERSION or COMMIT changes.
FROM compile AS build
ARG VERSION=dev
ARG COMMIT=unknown
RUN go build -trimpath -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" -o /out/changesink ./cmd/changesink

# Demo data generator for docker-compose.yml's one-shot `demo` service (not part of the
# changesink image).
FROM compile AS demo-build
RUN go build -trimpath -ldflags "-s -w" -o /out/changesink-demo ./cmd/changesink-demo

FROM ${BASE_IMAGE} AS demo
COPY --from=modules /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=demo-build /out/changesink-demo /usr/local/bin/changesink-demo
CMD ["changesink-demo", "--help"]

# The changesink image (the default, last stage).
FROM ${BASE_IMAGE} AS changesink
# BusyBox gives /bin/sh (Kestra runs `/bin/sh -c`); the CA bundle comes from the builder (Debian's
# ca-certificates in golang:*) to the path Go's crypto/tls reads first, for TLS to Kafka,
# PostgreSQL and ClickHouse. (Alpine would add ~7 MB and push the image past 30 MB.)
COPY --from=modules /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/changesink /usr/local/bin/changesink
# No USER: the image runs as root on purpose. Kestra's Docker task runner copies the working
# directory into the container owned by root:root 0755, so a non-root user could not write
# batch-report.json, expected.jsonl or pending.jsonl (kestra-io/plugin-scripts#411); the shipped
# flows also set the runner's `user: "0"`. The process needs no other privilege.
# No ENTRYPOINT: shell.Commands clears it anyway; `docker run IMAGE` prints the help.
CMD ["changesink", "--help"]
# The labels last: VERSION and COMMIT change them on every commit, and nothing after them is rebuilt.
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="changesink" \
      org.opencontainers.image.description="Keep read models current from change streams (Kafka compacted topic -> PostgreSQL, PostgreSQL CDC -> ClickHouse), run from Kestra flows." \
      org.opencontainers.image.source="https://github.com/changesink/changesink" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
