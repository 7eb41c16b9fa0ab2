#!/usr/bin/env bash
# Usage: with-etcd.sh CMD [ARGS...]
# Starts a private etcd (cl_start_etcd of test/lib/cluster.sh: ports claimed
# by cl_free_port, so parallel unit tests never race for one) in a temporary
# directory, exports ZL_TEST_ETCD=http://127.0.0.1:PORT and ZL_TEST_ETCD_PID,
# runs CMD, then stops etcd (by its PID), drops the port claims and removes
# the directory. Exit status is CMD's.
set -u
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster.sh"
CL_DIR=$(mktemp -d /tmp/zl-etcd.XXXXXX)
trap 'cl_stop etcd; cl_ports_release; rm -rf "$CL_DIR"' EXIT
if ! cl_start_etcd 2>"$CL_DIR/start.err"; then
	echo "with-etcd: etcd did not start:" >&2
	cat "$CL_DIR/start.err" >&2
	exit 1
fi
export ZL_TEST_ETCD=$CL_ETCD
ZL_TEST_ETCD_PID=$(cl_pid etcd)
export ZL_TEST_ETCD_PID
"$@"
