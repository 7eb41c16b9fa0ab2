# One image with every Zipline binary: zipline-storage, zipline-controller,
# zipline-node and zl. Build:
#   podman build -t zipline:dev .      (or docker build; offline, with local
#   Debian base images made by debootstrap: scripts/build-image.sh)
# The image runs as the unprivileged user `zipline` (uid 10001) by default;
# the Helm chart runs the node plugin and the storage daemon as root, because
# they mount filesystems, open /dev and write hostPath data directories.

############################################################ build
FROM debian:bookworm AS build
ARG BUILD_TYPE=RelWithDebInfo
ENV DEBIAN_FRONTEND=noninteractive
# The same packages as scripts/install-deps.sh needs for building (no test
# tools), plus ninja and the headers of the RDMA and FUSE code paths;
# cmocka only because the top-level CMakeLists configures the unit tests.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libcurl4-openssl-dev libjansson-dev liburing-dev libisal-dev libssl-dev \
      libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libprotobuf-dev \
      libfuse3-dev libibverbs-dev librdmacm-dev libcmocka-dev libmicrohttpd-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .
# Build the daemons and the CLI only (no unit tests, no fuzzers). Then list the Debian packages of every shared library the binaries link:
# the runtime stage installs exactly these.
RUN set -eu; \
    targets="zipline-storage zl zipline-controller zipline-node"; \
    cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE"; \
    cmake --build /build -j"$(nproc)" --target $targets; \
    mkdir -p /out/bin; \
    for t in $targets; do install -m 0755 -s "/build/bin/$t" /out/bin/; done; \
    ldd /out/bin/* | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u > /tmp/libs; \
    : > /tmp/owners; \
    for lib in $(cat /tmp/libs); do \
      dpkg -S "$lib" >> /tmp/owners 2>/dev/null \
        || dpkg -S "$(readlink -f "$lib")" >> /tmp/owners 2>/dev/null \
        || dpkg -S "${lib#/usr}" >> /tmp/owners 2>/dev/null \
        || { echo "no Debian package owns $lib" >&2; exit 1; }; \
    done; \
    cut -d: -f1 /tmp/owners | sort -u > /out/runtime-packages; \
    echo "runtime libraries come from:"; cat /out/runtime-packages

############################################################ runtime
FROM debian:bookworm-slim
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages /usr/share/zipline/runtime-packages
# Besides the linked libraries, what the daemons run or load at run time:
#   rdma-core, ibverbs-providers  verbs providers (mlx5, ...) dlopen()ed by libibverbs
#   e2fsprogs, xfsprogs           mkfs/fsck/resize2fs/xfs_growfs on the node
#   util-linux, mount             blkid, losetup, mount, umount
#   fuse3                         fusermount3 for the FUSE frontend
#   kmod                          modprobe nbd / fuse on the node
#   iproute2                      `ip` to find the advertise address on a
#                                 Multus interface, `rdma link` for diagnosis
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      $(cat /usr/share/zipline/runtime-packages) \
      rdma-core ibverbs-providers e2fsprogs xfsprogs util-linux mount fuse3 kmod iproute2 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 zipline \
 && useradd --uid 10001 --gid zipline --no-create-home --no-log-init --home-dir /nonexistent \
      --shell /usr/sbin/nologin zipline
COPY --from=build /out/bin/ /usr/local/bin/
LABEL org.opencontainers.image.title="zipline" \
      org.opencontainers.image.description="Zipline: replicated block storage for Kubernetes over RDMA (CSI driver, storage daemon, zl CLI)" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
CMD ["zipline-storage", "--help"]
