#!/usr/bin/env bash
# Installs every Debian package Zipline needs to build, test and run locally.
# Idempotent: only calls apt when something is missing.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config clang llvm libclang-rt-14-dev
  libcurl4-openssl-dev libjansson-dev liburing-dev libisal-dev
  libcmocka-dev libssl-dev
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler libprotobuf-dev
  python3-grpcio python3-protobuf python3-grpc-tools
  libfuse3-dev fuse3
  etcd-server etcd-client
  fio libnbd-bin libnbd-dev nbdkit
  e2fsprogs xfsprogs util-linux procps psmisc
  rdma-core libibverbs-dev librdmacm-dev ibverbs-providers ibverbs-utils rdmacm-utils perftest
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
