#!/bin/sh
# base-image.sh - make `debian:bookworm-slim` available to the Docker engine
# when it cannot be pulled (a machine that reaches Debian's archive but no
# container registry).
#
#   scripts/base-image.sh
#
# A machine with a registry needs none of this: `docker build` pulls the
# official image.  Here: when the engine has no debian:bookworm-slim and a
# pull fails, debootstrap a minimal Debian 12 (variant minbase) from the
# archive this machine's apt uses, slim it as the official -slim images are
# (no documentation, manual pages or locales, now or in later installs;
# copyright files are kept), and import it under that name.  Does nothing
# when the image is there.  Needs root and DOCKER_HOST (or the default
# socket) pointing at an engine; takes about a minute.
set -eu

IMAGE=debian:bookworm-slim
say() { echo "base-image: $*" >&2; }

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE is present"
  exit 0
fi
if timeout 60 docker pull -q "$IMAGE" >/dev/null 2>&1; then
  say "pulled $IMAGE"
  exit 0
fi

# The archive apt uses here: deb822 sources first, then the one-line form.
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
if ! command -v debootstrap >/dev/null 2>&1; then
  apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends debootstrap >&2
fi

root=$(mktemp -d /tmp/attnd-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
say "no $IMAGE and no registry: building it with debootstrap from $mirror"
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1; then
  tail -20 "$root.log" >&2
  exit 1
fi
rm -f "$root.log"

# What dpkg must never install again in images built from this one.
cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
# ... and what debootstrap installed already.
find "$root/usr/share/doc" -type f ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias \
  -exec rm -rf {} +
rm -rf "$root/usr/share/man" "$root/usr/share/groff" "$root/usr/share/info" \
  "$root/usr/share/lintian" "$root"/var/cache/apt/archives/*.deb \
  "$root"/var/lib/apt/lists/* "$root"/var/cache/debconf/*-old \
  "$root"/var/log/*.log
# apt inside the image uses the same archive.
rm -f "$root/etc/apt/sources.list"
if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
  cp /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/"
else
  echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
fi

tar -C "$root" --numeric-owner -c . |
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$IMAGE" >/dev/null
say "imported $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
