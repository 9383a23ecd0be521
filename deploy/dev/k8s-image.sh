#!/usr/bin/env bash
# `make image`: hookline's container image without Docker, with buildah (Debian
# package) from deploy/dev/k8s-image.Containerfile. Builds the release
# binaries exactly as the Dockerfile's builder stage does, stages a root
# filesystem with them and the shared libraries they load, builds the image
# IMAGE (default docker.io/library/hookline:dev, what a pod's `hookline:dev`
# resolves to) into buildah's vfs storage and writes it as a docker-archive
# to $TARGET_DIR/image/hookline.tar, for `ctr images import` (k8s.sh import).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
IMAGE=${IMAGE:-docker.io/library/hookline:dev}
CARGO=${CARGO:-cargo}
target=${CARGO_TARGET_DIR:-$repo/target}
out=$target/image
rootfs=$out/rootfs
log() { printf 'k8s-image: %s\n' "$*" >&2; }
if ! command -v buildah > /dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    log "installing buildah (Debian package)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah > /dev/null
  else
    log "buildah not found: apt-get install buildah"
    exit 1
  fi
fi

# The image must behave as the Dockerfile's: the same user, ports, env and
# entrypoint (the Dockerfile has them in its runtime stage only).
for kw in USER EXPOSE ENV ENTRYPOINT; do
  if ! diff <(grep "^$kw " Dockerfile) <(grep "^$kw " deploy/dev/k8s-image.Containerfile) > /dev/null; then
    log "$kw differs between Dockerfile and deploy/dev/k8s-image.Containerfile: keep them the same"
    exit 1
  fi
done

bins=(hookline-fanout hookline-dispatcher hookline-dlq-sink)
log "cargo build --release (the Dockerfile's builder command)"
nice -n 5 "$CARGO" build --release --locked --features hookline-dlq-sink/s3 \
  -p hookline-fanout -p hookline-dispatcher -p hookline-dlq-sink --bins

rm -rf "$rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
for b in "${bins[@]}"; do install -m 0755 "$target/release/$b" "$rootfs/usr/local/bin/$b"; done
# Exactly the shared objects the binaries load, the dynamic loader included,
# at the paths ldd resolves them to (symlinks followed).
for lib in $(for b in "${bins[@]}"; do ldd "$target/release/$b"; done |
  grep -o '/[^ ]*' | sort -u); do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done
# glibc looks the loader up at its canonical path: /lib64 on x86-64.
if [ -e /lib64/ld-linux-x86-64.so.2 ] && [ ! -e "$rootfs/lib64/ld-linux-x86-64.so.2" ]; then
  mkdir -p "$rootfs/lib64"
  cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/lib64/"
fi
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nhookline:x:65532:65532:hookline:/nonexistent:/usr/sbin/nologin\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\nhookline:x:65532:\n' > "$rootfs/etc/group"
# Name resolution from /etc/hosts, then DNS (Kubernetes mounts both files).
printf 'hosts: files dns\n' > "$rootfs/etc/nsswitch.conf"

# Smoke test of the staged tree before it becomes an image: every binary
# starts with only these libraries (chroot, as the container would).
for b in "${bins[@]}"; do
  chroot "$rootfs" "/usr/local/bin/$b" --version > /dev/null ||
    { log "$b does not start in the staged root filesystem"; exit 1; }
done

log "buildah build $IMAGE"
buildah --storage-driver vfs build -q --layers=false -f deploy/dev/k8s-image.Containerfile -t "$IMAGE" "$rootfs" > /dev/null
rm -f "$out/hookline.tar"
buildah --storage-driver vfs push -q "$IMAGE" "docker-archive:$out/hookline.tar:$IMAGE"
log "$IMAGE: $(du -h "$out/hookline.tar" | cut -f1) in $out/hookline.tar"
