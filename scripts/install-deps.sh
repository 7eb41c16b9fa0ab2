#!/usr/bin/env bash
# Installs every Debian package Zipline needs to build, test (`make test`)
# and run locally, on Debian bookworm. A fresh machine needs only this
# script's own prerequisites: bash, dpkg and apt, as root.
# Idempotent: only calls apt when something is missing.
# Not listed: podman and debootstrap (scripts/build-image.sh installs them
# for the image test) and qemu (the VM test harness installs it).
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config clang llvm libclang-rt-14-dev
  libcurl4-openssl-dev libjansson-dev liburing-dev libisal-dev
  libcmocka-dev libssl-dev openssl
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler libprotobuf-dev
  python3 python3-grpcio python3-protobuf python3-grpc-tools python3-pkg-resources
  libfuse3-dev fuse3
  libmicrohttpd-dev python3-prometheus-client
  etcd-server etcd-client
  fio libnbd-bin libnbd-dev nbdkit
  e2fsprogs xfsprogs util-linux mount procps psmisc kmod iproute2
  curl ca-certificates git
  unzip
  rdma-core libibverbs-dev librdmacm-dev ibverbs-providers ibverbs-utils rdmacm-utils perftest
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# node and npm (chart checks): any working install will do — a machine may
# carry another build of nodejs (one that bundles npm and conflicts with
# Debian's npm package); only where none works install Debian's.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
