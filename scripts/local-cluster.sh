#!/usr/bin/env bash
# Local Zipline cluster for `make run` / `make stop`: a real etcd, three
# zipline-storage daemons on loopback and zipline-controller, whose cluster
# manager (--manager=on) makes the cluster heal: a storage daemon that
# restarts catches up and rejoins by itself (docs/ARCHITECTURE.md section
# 11); with zipline-node built, the CSI demo too. State in $ZIPLINE_LOCAL_DIR (default
# /var/lib/zipline-local). `zl` finds this etcd through
# $ZIPLINE_LOCAL_DIR/etcd.endpoints, and trusts that file only when nobody but
# root or the invoking user can have written it, so the directory is created
# 0755 and refused if it is owned by someone else or writable by others.
#   local-cluster.sh start|stop|demo|status|wipe
# Environment: ZIPLINE_LOCAL_DIR (a directory you own, e.g. inside a checkout;
# needed when not root), ZIPLINE_LOCAL_ETCD_PORT (default 23790),
# ZIPLINE_LOCAL_STORAGE_PORT (storage-I listens on it + I, default 7100),
# ZIPLINE_BIN (default build/bin).
set -euo pipefail
umask 022
SRC=$(cd "$(dirname "$0")/.." && pwd)
# /var/lib, not /run or /tmp: the etcd and chunk data must survive reboots and
# `make stop` (only `make wipe` removes them), and must not sit in a
# world-writable directory where anyone could plant the endpoints file.
CL_DIR=${ZIPLINE_LOCAL_DIR:-/var/lib/zipline-local}
case "$CL_DIR" in
/*) ;;
*) CL_DIR=$PWD/$CL_DIR ;;
esac
export CL_DIR
export CL_BIN=${ZIPLINE_BIN:-$SRC/build/bin}
source "$SRC/test/lib/cluster.sh"
ETCD_PORT=${ZIPLINE_LOCAL_ETCD_PORT:-23790}
ETCD_PEER_PORT=$((ETCD_PORT + 10))
STORAGE_PORT=${ZIPLINE_LOCAL_STORAGE_PORT:-7100}
ZL="$CL_BIN/zl"
NODE_ID=local-node

alive() { local p; p=$(cl_pid "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

die() { cl_log "$*"; exit 1; }

# The state dir: created 0755; an existing one must be a directory of root or
# of this user that group and others cannot write (what zl checks too).
prepare_dir() {
	local me owner mode
	me=$(id -u)
	if [ ! -e "$CL_DIR" ]; then
		# umask 022: 0755, parents too.
		mkdir -p "$CL_DIR" 2>/dev/null ||
			die "cannot create $CL_DIR: run as root (the CSI demo mounts a filesystem too) or set ZIPLINE_LOCAL_DIR to a directory you own"
	fi
	if [ ! -d "$CL_DIR" ] || [ -L "$CL_DIR" ]; then
		die "$CL_DIR is not a directory: remove it or set ZIPLINE_LOCAL_DIR"
	fi
	owner=$(stat -c %u "$CL_DIR")
	mode=$(stat -c %a "$CL_DIR")
	[ "$owner" = 0 ] || [ "$owner" = "$me" ] ||
		die "$CL_DIR is owned by uid $owner, not by root or you (uid $me): zl would not trust it; remove it or set ZIPLINE_LOCAL_DIR"
	(( (8#$mode & 8#022) == 0 )) ||
		die "$CL_DIR is writable by group or others (mode $mode): zl would not trust it; fix it with chmod go-w $CL_DIR"
}

# Reads the endpoints of the running etcd.
endpoints() {
	[ -f "$CL_DIR/etcd.endpoints" ] || die "no local cluster in $CL_DIR: start it with 'make run'"
	cat "$CL_DIR/etcd.endpoints"
}

# zl as a user runs it: no ZIPLINE_ETCD, the endpoints file of $CL_DIR (so
# the demo also checks that zl trusts it).
zl_local() { env -u ZIPLINE_ETCD ZIPLINE_LOCAL_DIR="$CL_DIR" "$ZL" "$@"; }

start() {
	prepare_dir
	if alive etcd; then
		CL_ETCD=$(endpoints)
		cl_log "etcd already running at $CL_ETCD"
	else
		# setsid: the cluster outlives the make process that started it.
		CL_ETCD=""
		set +e
		setsid bash -c "source '$SRC/test/lib/cluster.sh'; cl_start_etcd $ETCD_PORT $ETCD_PEER_PORT" </dev/null
		rc=$?
		set -e
		[ $rc -eq 0 ] || die "could not start etcd (port $ETCD_PORT busy? set ZIPLINE_LOCAL_ETCD_PORT)"
		CL_ETCD=$(endpoints)
	fi
	chmod 0644 "$CL_DIR/etcd.endpoints" # zl refuses a file others may write
	export CL_ETCD
	# Healing needs the manager; without zipline-controller the daemons run
	# as in 0.1 (--heal off) rather than park writes for a manager that
	# never comes.
	if [ ! -x "$CL_BIN/zipline-controller" ]; then
		cl_log "no $CL_BIN/zipline-controller: no cluster manager, storage runs with --heal off (a restarted daemon does not rejoin)"
		export CL_STORAGE_FLAGS="--heal off"
	fi
	for i in 1 2 3; do
		if alive "storage-$i"; then
			cl_log "storage-$i already running"
			continue
		fi
		setsid bash -c "source '$SRC/test/lib/cluster.sh'; cl_start_storage $i $((STORAGE_PORT + i))" </dev/null
		cl_log "storage-$i started on 127.0.0.1:$((STORAGE_PORT + i)), data $CL_DIR/storage-$i/data, log $CL_DIR/storage-$i/log"
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
		echo "manager:        on, in zipline-controller (healing; decisions in $CL_DIR/controller/log)"
	elif [ -x "$CL_BIN/zipline-controller" ]; then
		if alive manager; then
			cl_log "manager already running"
		else
			# Production timings: a node gone 10 min is replaced.
			setsid bash -c "source '$SRC/test/lib/cluster.sh'; CL_DOWN_OUT=600 cl_start_manager manager" </dev/null ||
				die "the cluster manager did not start; see $CL_DIR/manager/log"
		fi
		echo "manager:        on, zipline-controller --manager=on (healing; log $CL_DIR/manager/log)"
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
	endpoints >/dev/null
	zl_local volume create demo --size 256M --replicas 3
	head -c 32M /dev/urandom >"$CL_DIR/demo.in"
	zl_local volume import demo "$CL_DIR/demo.in"
	zl_local volume export demo "$CL_DIR/demo.out"
	if cmp -n $((32 << 20)) "$CL_DIR/demo.in" "$CL_DIR/demo.out"; then
		echo "demo: wrote 32 MiB of random data to volume 'demo' and read it back: identical"
	else
		echo "demo: read-back differs!" >&2
		exit 1
	fi
	rm -f "$CL_DIR/demo.in" "$CL_DIR/demo.out"
	csi_demo
	zl_local volume inspect demo | head -18
	echo
	zl_local status
	echo
	if [ "$CL_DIR" = /var/lib/zipline-local ]; then
		echo "Cluster is running. Try: $ZL bench demo --rw randread --bs 4k --qd 32 --seconds 5"
	else
		echo "Cluster is running. Try: ZIPLINE_LOCAL_DIR=$CL_DIR $ZL bench demo --rw randread --bs 4k --qd 32 --seconds 5"
	fi
	echo "Stop it with: make stop"
}

case "${1:-}" in
start) start ;;
demo) demo ;;
stop) stop ;;
status) endpoints >/dev/null; zl_local status ;;
wipe)
	case "$CL_DIR" in
	/ | "$HOME" | "$SRC") die "refusing to remove $CL_DIR: set ZIPLINE_LOCAL_DIR to the cluster's own directory" ;;
	esac
	stop
	rm -rf "$CL_DIR"
	echo "removed $CL_DIR"
	;;
*) echo "usage: $0 start|stop|demo|status|wipe" >&2; exit 2 ;;
esac
