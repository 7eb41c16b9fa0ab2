#!/usr/bin/env bash
# Local Zipline cluster for `make run` / `make stop`: a real etcd and three
# zipline-storage daemons on loopback, state in $ZIPLINE_LOCAL_DIR
# (default /tmp/zipline-local). `zl` finds this etcd through
# $ZIPLINE_LOCAL_DIR/etcd.endpoints.
#   local-cluster.sh start|stop|demo|status|wipe
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
export CL_DIR=${ZIPLINE_LOCAL_DIR:-/tmp/zipline-local}
export CL_BIN=${ZIPLINE_BIN:-$SRC/build/bin}
source "$SRC/test/lib/cluster.sh"
ETCD_PORT=${ZIPLINE_LOCAL_ETCD_PORT:-23790}
ETCD_PEER_PORT=$((ETCD_PORT + 10))
ZL="$CL_BIN/zl"
NODE_ID=local-node

alive() { local p; p=$(cl_pid "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

start() {
	mkdir -p "$CL_DIR"
	if alive etcd; then
		CL_ETCD=$(cat "$CL_DIR/etcd.endpoints")
		cl_log "etcd already running at $CL_ETCD"
	else
		# setsid: the cluster outlives the make process that started it.
		CL_ETCD=""
		set +e
		setsid bash -c "source '$SRC/test/lib/cluster.sh'; cl_start_etcd $ETCD_PORT $ETCD_PEER_PORT" </dev/null
		rc=$?
		set -e
		[ $rc -eq 0 ] || { cl_log "could not start etcd (port $ETCD_PORT busy? set ZIPLINE_LOCAL_ETCD_PORT)"; exit 1; }
		CL_ETCD=$(cat "$CL_DIR/etcd.endpoints")
	fi
	export CL_ETCD
	for i in 1 2 3; do
		if alive "storage-$i"; then
			cl_log "storage-$i already running"
			continue
		fi
		setsid bash -c "source '$SRC/test/lib/cluster.sh'; cl_start_storage $i $((7100 + i))" </dev/null
		cl_log "storage-$i started on 127.0.0.1:$((7100 + i)), data $CL_DIR/storage-$i/data, log $CL_DIR/storage-$i/log"
	done
	if ! cl_wait_nodes 3; then
		for i in 1 2 3; do echo "--- storage-$i log:" >&2; tail -5 "$CL_DIR/storage-$i/log" >&2; done
		exit 1
	fi
	if have_csi; then
		if alive controller && alive node; then
			cl_log "zipline-controller and zipline-node already running"
		else
			cl_stop node; cl_stop controller
			setsid bash -c "source '$SRC/test/lib/cluster.sh'; cl_start_csi $NODE_ID" </dev/null
		fi
		echo "CSI controller: unix://$CL_DIR/csi/controller.sock (log $CL_DIR/controller/log)"
		echo "CSI node:       unix://$CL_DIR/csi/node.sock (node id $NODE_ID, log $CL_DIR/node/log)"
	fi
}

have_csi() { [ -x "$CL_BIN/zipline-controller" ] && [ -x "$CL_BIN/zipline-node" ]; }

csi_demo() {
	have_csi || return 0
	/usr/bin/python3 "$SRC/scripts/csi-demo.py" "$CL_DIR/csi" "$NODE_ID"
	echo
	df -h "$CL_DIR/csi/mnt/csi-demo"
	echo
}

stop() {
	if have_csi && alive node && alive controller; then
		/usr/bin/python3 "$SRC/scripts/csi-demo.py" "$CL_DIR/csi" "$NODE_ID" --teardown ||
			cl_log "CSI teardown failed; unmounting what is left"
	fi
	# Leftovers of a crashed node plugin: unmount, never fail the stop.
	for m in "$CL_DIR/csi/mnt/csi-demo" "$CL_DIR/csi/staging/csi-demo"; do
		mountpoint -q "$m" 2>/dev/null && umount "$m"
	done
	cl_stop_all
	echo "local cluster stopped (data kept in $CL_DIR; 'make wipe' removes it)"
}

demo() {
	export ZIPLINE_ETCD=$(cat "$CL_DIR/etcd.endpoints")
	"$ZL" volume create demo --size 256M --replicas 3
	head -c 32M /dev/urandom >"$CL_DIR/demo.in"
	"$ZL" volume import demo "$CL_DIR/demo.in"
	"$ZL" volume export demo "$CL_DIR/demo.out"
	if cmp -n $((32 << 20)) "$CL_DIR/demo.in" "$CL_DIR/demo.out"; then
		echo "demo: wrote 32 MiB of random data to volume 'demo' and read it back: identical"
	else
		echo "demo: read-back differs!" >&2
		exit 1
	fi
	rm -f "$CL_DIR/demo.in" "$CL_DIR/demo.out"
	csi_demo
	"$ZL" volume inspect demo | head -18
	echo
	"$ZL" status
	echo
	echo "Cluster is running. Try: $ZL bench demo --rw randread --bs 4k --qd 32 --seconds 5"
	echo "Stop it with: make stop"
}

case "${1:-}" in
start) start ;;
demo) demo ;;
stop) stop ;;
status) export ZIPLINE_ETCD=$(cat "$CL_DIR/etcd.endpoints"); "$ZL" status ;;
wipe) stop; rm -rf "$CL_DIR"; echo "removed $CL_DIR" ;;
*) echo "usage: $0 start|stop|demo|status|wipe" >&2; exit 2 ;;
esac
