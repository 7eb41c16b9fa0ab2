#!/usr/bin/env bash
# The storage e2e (test/e2e/cluster_e2e.sh: verified random writes, kill -9 of
# a daemon, restart, the daemon heals back in sync, rm leaves no chunk file) over
# RDMA inside the Soft-RoCE guest: three zipline-storage daemons on three
# addresses of rxe0, each with --transport rdma, zl and the I/O client with
# transport rdma; the script checks in the daemons' logs and in `zl status`
# that the connections were RDMA.
#
# Usage: test/rdma/cluster_rdma.sh BUILD_DIR: the part "cluster" of rdma_vm
# (test/rdma/rdma-vm.sh, which runs it in its guest; on the host this
# script runs rdma-vm.sh BUILD_DIR cluster).
# Environment: ZL_E2E_BYTES (default 64M here), ZL_E2E_VOLUME_SIZE (default
# 128M here), plus rdma-vm.sh's.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=part.sh
. "$here/part.sh"
rdma_part_enter cluster "${1:-}"

# In the guest. State (etcd, chunk replicas) on the guest's tmpfs, not on
# the 9p share (O_DIRECT, speed): cluster_e2e.sh keeps it under BUILD_DIR,
# so BUILD_DIR is a tmpfs directory whose bin/ points at the real build.
set -e
read -r -a ips <<<"${RXE_IPS:-}"
if [[ ${#ips[@]} -ne 3 ]]; then
	echo "cluster_rdma: FAIL: the guest has ${#ips[@]} rxe0 addresses (RXE_IPS='${RXE_IPS:-}'), want 3" >&2
	exit 1
fi
work=$(mktemp -d /tmp/zl-rdma-e2e.XXXXXX)
# The next part of the guest gets the memory back.
trap 'rm -rf "$work"' EXIT
ln -s "$build/bin" "$work/bin"
# The replicas and the daemons' journals share the guest's tmpfs: 32 MiB
# journals instead of the default 128 MiB each.
export CL_JOURNAL_SIZE=${CL_JOURNAL_SIZE:-32M}
# A smaller volume and first phase than on the host (512 MiB, 256 MiB):
# e2e_io reads the whole volume back four times and every MiB crosses
# Soft-RoCE under TCG. What is checked does not depend on these sizes:
# every acknowledged write is verified whatever their number, the kill -9
# comes after 32 MiB of its own 96 MiB phase (QD 16, fixed in e2e_io), and
# the restarted daemon has what those 96 MiB wrote to copy while it heals.
# 128 MiB still gives 32 slices of 4 MiB, each on 3 of the 3 daemons.
export ZL_E2E_BYTES=${ZL_E2E_BYTES:-64M} ZL_E2E_VOLUME_SIZE=${ZL_E2E_VOLUME_SIZE:-128M}
echo "cluster_rdma: guest $(uname -r), rxe0 addresses ${ips[*]}, bytes $ZL_E2E_BYTES, volume $ZL_E2E_VOLUME_SIZE"
t0=$(date +%s)
ZL_E2E_STORAGE_IPS="${ips[*]}" ZL_E2E_TRANSPORT=rdma \
	bash "$here/../e2e/cluster_e2e.sh" "$work"
echo "cluster_rdma: PASS in $(($(date +%s) - t0)) s of guest time"
