# attnd as a container: a build stage (release build, unit tests, stripped
# binary) and a runtime stage with only the runtime libraries.
#
#   docker build -t attnd .
#   docker run --rm --network host attnd          # serves 0.0.0.0:8080
#
# Settings: /etc/attnd/attnd.json (config/container/attnd.json; mount your
# own over it), ATTND_<KEY> environment variables, or flags after the image
# name (docker run attnd --workers 4).  Resident models: /models (the demo
# model is baked in; mount a folder of your own there).  docs/deploy.md has
# the details.

ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS build
# Marks the build stage's image, which the classic builder leaves behind
# untagged (about 750 MB): scripts/build-image.sh removes the images with
# this label, and no other.
LABEL org.attnd.stage=build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential meson ninja-build pkg-config libopenblas-dev \
      libcjson-dev libmicrohttpd-dev zlib1g-dev check libsubunit-dev \
      python3-yaml \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# A release build for any x86-64 CPU (the kernels for AVX2 and AVX-512 are
# chosen at run time), its unit tests, then the stripped binary.
RUN meson setup /build --buildtype=release --prefix=/usr/local \
 && ninja -C /build \
 && /build/tests/unit \
 && install -D -s -m 0755 /build/src/attnd /out/usr/local/bin/attnd

FROM ${DEBIAN_IMAGE}
ARG VERSION=0.1.0
ARG SOURCE=unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.title="attnd" \
      org.opencontainers.image.description="HTTP server for scaled dot-product and multi-head attention (KServe v2 and /v1/attention)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="MIT"
# The runtime libraries only; zlib is in the base image already.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libmicrohttpd12 libcjson1 libopenblas0-pthread zlib1g \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old \
      /var/log/apt /var/log/dpkg.log
COPY --from=build /out/ /
COPY config/container/attnd.json /etc/attnd/attnd.json
COPY config/models/ /models/
# uid 10001 owns nothing it runs: any --user works, and so does --read-only.
# /var/lib/attnd/sessions: where a volume for session_dir goes (off unless
# ATTND_SESSION_DIR is set); uid 10001 and gid 0 may write it, and a new
# named volume mounted there starts with that owner and mode.
RUN useradd --uid 10001 --gid 0 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin attnd \
 && install -d -o 10001 -g 0 -m 0770 /var/lib/attnd/sessions
USER 10001
ENV ATTND_CONFIG=/etc/attnd/attnd.json
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/attnd", "--healthcheck"]
ENTRYPOINT ["/usr/local/bin/attnd"]
