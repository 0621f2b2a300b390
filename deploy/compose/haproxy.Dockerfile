# HAProxy from Debian 12, for the compose stack where no registry is at
# hand (with one, the official haproxy:2.6 image does the same job: mount
# the same haproxy.cfg at /usr/local/etc/haproxy/haproxy.cfg).
ARG DEBIAN_IMAGE=debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends haproxy \
 && rm -rf /var/lib/apt/lists/*
USER haproxy
STOPSIGNAL SIGUSR1
ENTRYPOINT ["/usr/sbin/haproxy", "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
