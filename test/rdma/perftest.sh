#!/usr/bin/env bash
# perftest latency of the Soft-RoCE guest, for comparing the transport's
# numbers with raw verbs in the same guest: ib_send_lat and ib_write_lat
# (RC, rdma_cm connection, 4 KiB and 64 B messages). Prints the perftest
# tables. Usage: test/rdma/perftest.sh [iterations]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
iters=${1:-2000}
exec "$here/run-in-vm.sh" bash -c '
set -u
run() {
	local tool=$1 size=$2
	echo "=== $tool size=$size iters='"$iters"' ==="
	$tool -d "$RXE_DEV" -x "$RXE_GID_INDEX" -s "$size" -n '"$iters"' -R >/tmp/srv.log 2>&1 &
	local srv=$!
	local ok=1
	for try in 1 2 3 4 5; do
		# The perftest server prints nothing when it listens: the client
		# is tried after a pause, up to 5 times (a refused try costs nothing).
		sleep 2
		if $tool -d "$RXE_DEV" -x "$RXE_GID_INDEX" -s "$size" -n '"$iters"' -R "$RXE_IP" >/tmp/cli.log 2>&1; then
			ok=0
			break
		fi
	done
	wait $srv
	cat /tmp/cli.log
	# Under TCG perftest sometimes cannot calibrate the CPU clock and prints
	# "inf"; that run says nothing, the caller retries it.
	if grep -q " inf " /tmp/cli.log; then
		return 2
	fi
	return $ok
}
rc=0
for t in ib_send_lat ib_write_lat; do
	for s in 64 4096; do
		run $t $s
		r=$?
		if [ $r = 2 ]; then
			echo "(clock calibration failed, once more)"
			run $t $s || rc=1
		elif [ $r != 0 ]; then
			rc=1
		fi
	done
done
exit $rc'
