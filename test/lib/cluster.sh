# Sourced by e2e tests and scripts/local-cluster.sh: start/stop a real etcd and
# zipline-storage daemons on loopback. Every process is tracked by PID in
# $CL_DIR and only those PIDs are ever signalled.
#
# Required before use: CL_DIR (state dir), CL_BIN (dir with zipline-storage, zl).
# Environment read by every test that starts storage daemons:
# ZL_TEST_WRITE_PATH=direct|journal (zipline-storage --write-path on every
# daemon a test starts, cl_write_path_flags; unset: no flag, the daemon's
# default), ZL_TEST_SEED (cl_seed), CL_AUTH, CL_TLS, CL_LISTEN_HOST,
# CL_STORAGE_FLAGS (cl_start_storage).

CL_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# cl_metrics_port LOG: the HTTP port a daemon logged for --metrics ("metrics
# on http://HOST port=N"), the last one (a restart logs another); empty
# when none.
cl_metrics_port() { sed -n 's/.*metrics on http.* port=\([0-9]*\) .*/\1/p' "$1" | tail -1; }

# cl_free_port: a loopback TCP port that no other test holds, for a daemon
# to listen on. Binding port 0, closing and handing the number on is a race
# (a parallel test, or any outgoing connection, may get the port before the
# daemon binds it). Instead ports come from the 8000 below the kernel's
# ephemeral range (no connect() is given one) and are claimed, under one
# flock(1) shared by every test of the machine, as $CL_PORTS/PORT holding
# the claiming shell's PID ($$): a port whose claim names a live process is
# never handed out again; the claim is dropped by cl_ports_release (called by
# cl_stop_all) or, when its test died, taken over. A port is handed out only
# when nothing listens on it (a bind succeeds).
CL_PORTS=${CL_PORTS:-/tmp/zl-test-ports}
cl_free_port() {
	mkdir -p "$CL_PORTS" || return 1
	flock "$CL_PORTS/.lock" /usr/bin/python3 - "$CL_PORTS" "$$" <<'PY'
import os, random, socket, sys
d, me = sys.argv[1], sys.argv[2]
lo = int(open('/proc/sys/net/ipv4/ip_local_port_range').read().split()[0])
base = max(1024, lo - 8000)
n = lo - base
start = random.randrange(n)
for i in range(n):
    port = base + (start + i) % n
    claim = os.path.join(d, str(port))
    try:
        owner = int(open(claim).read().strip() or 0)
        if owner:
            os.kill(owner, 0)
            continue  # its test still runs
    except (FileNotFoundError, ValueError, ProcessLookupError):
        pass
    except PermissionError:
        continue  # alive, another user's
    s = socket.socket()
    try:
        s.bind(('127.0.0.1', port))
    except OSError:
        continue
    finally:
        s.close()
    with open(claim, 'w') as f:
        f.write(me + '\n')
    print(port)
    sys.exit(0)
sys.exit('cl_free_port: no free port in %d..%d' % (base, lo - 1))
PY
}

# cl_ports_release: drops every port claim of this shell (cl_free_port).
cl_ports_release() {
	[ -d "$CL_PORTS" ] || return 0
	flock "$CL_PORTS/.lock" /usr/bin/python3 - "$CL_PORTS" "$$" <<'PY'
import os, sys
d, me = sys.argv[1], sys.argv[2]
for name in os.listdir(d):
    p = os.path.join(d, name)
    if name.isdigit() and open(p).read().strip() == me:
        os.unlink(p)
PY
}

cl_log() { printf '[cluster] %s\n' "$*" >&2; }

# cl_seed NAME: the seed of a randomised test: $ZL_TEST_SEED when set (a
# replay), else one from the clock. Sets SEED and seeds bash's RANDOM with
# it; prints "NAME: seed S (ZL_TEST_SEED=S replays ...)" on stdout.
cl_seed() {
	SEED=${ZL_TEST_SEED:-$(($(date +%s%N) / 1000 % 1000000))}
	RANDOM=$SEED
	echo "$1: seed $SEED (ZL_TEST_SEED=$SEED replays the random choices)"
}

# cl_wait_http URL TRIES: waits for the etcd gateway to answer.
cl_wait_etcd() {
	local url=$1 tries=${2:-150}
	for _ in $(seq 1 "$tries"); do
		curl -s -m 1 -X POST -d '{}' "$url/v3/maintenance/status" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

# cl_require T BUILD_DIR PROGRAM...: exits 1 ("T: FAIL: ...") unless every
# BUILD_DIR/bin/PROGRAM is built, etcd is installed and /usr/bin/python3 is
# there (the tests' python, with grpc).
cl_require() {
	local t=$1 build=$2 b
	shift 2
	for b in "$@"; do
		[ -x "$build/bin/$b" ] || { echo "$t: FAIL: no $build/bin/$b: build it first" >&2; exit 1; }
	done
	command -v etcd >/dev/null || { echo "$t: FAIL: etcd is not installed" >&2; exit 1; }
	[ -x /usr/bin/python3 ] || { echo "$t: FAIL: /usr/bin/python3 is missing" >&2; exit 1; }
}

# cl_dump_logs LINES FILE...: the last LINES lines (debug lines left out) of
# each FILE that exists, after a "--- FILE" line, on stderr (for failures).
cl_dump_logs() {
	local n=$1 f
	shift
	for f in "$@"; do
		[ -f "$f" ] && { echo "--- $f" >&2; grep -v ' debug ' "$f" | tail -"$n" >&2; }
	done
	return 0
}

# cl_wait_count FILE REGEX N SECS: until N lines of FILE match REGEX (e.g.
# the acknowledged writes "^A " of an e2e_load log). Non-zero after SECS.
cl_wait_count() {
	local f=$1 re=$2 n=$3 secs=$4 c=0
	for _ in $(seq 1 $((secs * 10))); do
		c=$(grep -c -- "$re" "$f" 2>/dev/null || true)
		[ "${c:-0}" -ge "$n" ] && return 0
		sleep 0.1
	done
	cl_log "$f: ${c:-0} of $n lines match '$re' after $secs s"
	return 1
}

# cl_start_etcd [CLIENT_PORT [PEER_PORT]]: sets CL_ETCD.
cl_start_etcd() {
	local cport=${1:-$(cl_free_port)} pport=${2:-$(cl_free_port)}
	mkdir -p "$CL_DIR/etcd"
	etcd --name zl-etcd --data-dir "$CL_DIR/etcd/data" \
		--listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
		--listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
		--initial-cluster "zl-etcd=http://127.0.0.1:$pport" \
		--logger zap --log-level warn >>"$CL_DIR/etcd/etcd.log" 2>&1 &
	echo $! >"$CL_DIR/etcd/pid"
	export CL_ETCD="http://127.0.0.1:$cport"
	echo "$CL_ETCD" >"$CL_DIR/etcd.endpoints"
	if ! cl_wait_etcd "$CL_ETCD"; then
		cl_log "etcd did not start on $CL_ETCD; log follows"
		tail -20 "$CL_DIR/etcd/etcd.log" >&2
		return 1
	fi
	cl_log "etcd up at $CL_ETCD (pid $(cat "$CL_DIR/etcd/pid"))"
}

# CL_TLS=on|off (default off; docs/SECURITY.md): cl_tls_make makes a CA, a
# server certificate signed by it (SAN IP:127.0.0.1, IP:10.213.7.1 for
# storage_e2e's namespace, DNS:zipline-storage) and an unrelated CA with the
# openssl CLI in $CL_DIR/tls, and exports ZIPLINE_TLS_CA for zl, the e2e
# tools and the CSI daemons; cl_start_storage passes cl_tls_flags.
cl_tls_make() {
	local d="$CL_DIR/tls"
	[ -f "$d/ca.crt" ] && { export ZIPLINE_TLS_CA="$d/ca.crt"; return 0; }
	command -v openssl >/dev/null || { cl_log "CL_TLS=on needs the openssl CLI (scripts/install-deps.sh)"; return 1; }
	mkdir -p "$d"
	(
		set -e
		cd "$d"
		for ca in ca other-ca; do
			openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
				-subj "/CN=zipline-e2e-$ca" -keyout "$ca.key" -out "$ca.crt"
		done
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
			-subj /CN=zipline-storage -keyout tls.key -out tls.csr
		printf 'subjectAltName=IP:127.0.0.1,IP:10.213.7.1,DNS:zipline-storage\n' >ext.cnf
		openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
			-extfile ext.cnf -out tls.crt
	) >"$d/openssl.log" 2>&1 || { cl_log "cannot make TLS certificates; see $d/openssl.log"; return 1; }
	export ZIPLINE_TLS_CA="$d/ca.crt"
}

# cl_tls_flags: the zipline-storage TLS flags when CL_TLS=on, else nothing.
cl_tls_flags() {
	[ "${CL_TLS:-off}" = on ] || return 0
	echo "--tls-cert $CL_DIR/tls/tls.crt --tls-key $CL_DIR/tls/tls.key --tls-ca $CL_DIR/tls/ca.crt"
}

# cl_write_path_flags: "--write-path $ZL_TEST_WRITE_PATH" when that is set
# (the storage write path every test daemon uses: direct or journal, see
# zipline-storage --help), nothing when it is unset (the daemon's default).
# Every test script that starts zipline-storage passes these words.
cl_write_path_flags() {
	[ -n "${ZL_TEST_WRITE_PATH:-}" ] || return 0
	echo "--write-path $ZL_TEST_WRITE_PATH"
}

# cl_start_storage I [PORT] [extra flags...]: node id "node-I", data dir $CL_DIR/storage-I.
# $CL_STORAGE_FLAGS (e.g. "--heal on", set by cl_e2e_begin ... --heal on) go first.
# ZL_TEST_WRITE_PATH=direct|journal: zipline-storage --write-path (unset: none).
# CL_AUTH=on|off: zipline-storage --auth (docs/SECURITY.md), default on: every
# e2e test runs authenticated (zl, e2e_io and e2e_chunk send the cluster token).
# CL_LISTEN_HOST: the daemons' listen address (default 127.0.0.1; the RDMA
# tests in the VM use an address of rxe0).
cl_start_storage() {
	local i=$1 port=${2:-}
	shift; [ $# -gt 0 ] && shift
	local d="$CL_DIR/storage-$i"
	[ -n "$port" ] || port=$(cat "$d/port" 2>/dev/null || cl_free_port)
	mkdir -p "$d/data"
	echo "$port" >"$d/port"
	if [ "${CL_TLS:-off}" = on ]; then
		cl_tls_make || return 1
	fi
	# shellcheck disable=SC2046 # the flags are words
	"$CL_BIN/zipline-storage" --data-dir "$d/data" --listen "${CL_LISTEN_HOST:-127.0.0.1}:$port" \
		--node-id "node-$i" --label "zone=z$i" --etcd "$CL_ETCD" --auth "${CL_AUTH:-on}" \
		$(cl_tls_flags) $(cl_write_path_flags) \
		${CL_JOURNAL_SIZE:+--journal-size $CL_JOURNAL_SIZE} ${CL_STORAGE_FLAGS:-} "$@" \
		>>"$d/log" 2>&1 &
	echo $! >"$d/pid"
}

# cl_wait_nodes N: waits until N storage nodes are registered.
cl_wait_nodes() {
	local want=$1
	for _ in $(seq 1 200); do
		local n
		n=$(curl -s -m 2 -X POST -d "{\"key\":\"$(printf '/zipline/nodes/' | base64)\",\"range_end\":\"$(printf '/zipline/nodes0' | base64)\",\"count_only\":true}" "$CL_ETCD/v3/kv/range" | sed -n 's/.*"count":"\([0-9]*\)".*/\1/p')
		[ "${n:-0}" -ge "$want" ] && return 0
		sleep 0.1
	done
	cl_log "only ${n:-0} of $want storage nodes registered"
	return 1
}

cl_pid() { cat "$CL_DIR/$1/pid" 2>/dev/null; }

# cl_stop NAME [SIG]: signals the process recorded in $CL_DIR/NAME/pid and waits.
cl_stop() {
	local name=$1 sig=${2:-TERM} pid
	pid=$(cl_pid "$name") || return 0
	[ -n "$pid" ] || return 0
	if kill -0 "$pid" 2>/dev/null; then
		kill "-$sig" "$pid" 2>/dev/null
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then
			cl_log "$name (pid $pid) ignored SIG$sig for 10 s; sending KILL"
			kill -KILL "$pid" 2>/dev/null
		fi
	fi
	rm -f "$CL_DIR/$name/pid"
}

# cl_start_csi NODE_ID: zipline-controller and zipline-node on unix sockets
# $CL_DIR/csi/controller.sock and $CL_DIR/csi/node.sock. The controller runs
# the cluster manager (--manager=on, its default) with $CL_CONTROLLER_FLAGS
# (e.g. "--down-out-interval 30").
cl_start_csi() {
	local node_id=$1
	mkdir -p "$CL_DIR/csi" "$CL_DIR/controller" "$CL_DIR/node"
	"$CL_BIN/zipline-controller" --endpoint "unix://$CL_DIR/csi/controller.sock" \
		--etcd "$CL_ETCD" --manager=on ${CL_CONTROLLER_FLAGS:-} >>"$CL_DIR/controller/log" 2>&1 &
	echo $! >"$CL_DIR/controller/pid"
	"$CL_BIN/zipline-node" --endpoint "unix://$CL_DIR/csi/node.sock" --node-id "$node_id" \
		--etcd "$CL_ETCD" --state-dir "$CL_DIR/csi/node-state" --kubelet-dir "$CL_DIR/csi" \
		>>"$CL_DIR/node/log" 2>&1 &
	echo $! >"$CL_DIR/node/pid"
	for _ in $(seq 1 100); do
		[ -S "$CL_DIR/csi/controller.sock" ] && [ -S "$CL_DIR/csi/node.sock" ] && return 0
		sleep 0.1
	done
	cl_log "CSI sockets did not appear; see $CL_DIR/controller/log and $CL_DIR/node/log"
	return 1
}

# cl_start_manager [NAME] [flags...]: the one starter of the cluster manager
# of every test: a zipline-controller --manager=on in $CL_DIR/NAME (default
# "manager"; log $CL_DIR/NAME/log, CSI socket $CL_DIR/NAME/csi.sock, leader
# id NAME: a restart with the same id takes the leader key over at once, like
# a restarted pod), with test timings: --manager-grace ${CL_MANAGER_GRACE:-2},
# --down-out-interval ${CL_DOWN_OUT:-30}. Flags given here come last (they
# win). Tracked by PID like the others (cl_stop NAME, cl_stop_all); NAME is
# recorded in $CL_DIR/managers. Waits until the socket is up (10 s), or with
# CL_MANAGER_WAIT=leader until it logs "became leader" once more than before
# (30 s).
cl_start_manager() {
	local name=${1:-manager} n0 tries=100
	[ $# -gt 0 ] && shift
	local d="$CL_DIR/$name"
	mkdir -p "$d"
	rm -f "$d/csi.sock"
	n0=$(grep -c 'became leader' "$d/log" 2>/dev/null || true)
	[ "${CL_MANAGER_WAIT:-socket}" = leader ] && tries=300
	grep -qx "$name" "$CL_DIR/managers" 2>/dev/null || echo "$name" >>"$CL_DIR/managers"
	"$CL_BIN/zipline-controller" --endpoint "unix://$d/csi.sock" --etcd "$CL_ETCD" \
		--leader-id "$name" --log-level info --manager=on \
		--manager-grace "${CL_MANAGER_GRACE:-2}" --down-out-interval "${CL_DOWN_OUT:-30}" \
		"$@" >>"$d/log" 2>&1 &
	echo $! >"$d/pid"
	for _ in $(seq 1 "$tries"); do
		if [ "${CL_MANAGER_WAIT:-socket}" = leader ]; then
			[ "$(grep -c 'became leader' "$d/log" 2>/dev/null || true)" -gt "${n0:-0}" ] && return 0
		else
			[ -S "$d/csi.sock" ] && return 0
		fi
		kill -0 "$(cat "$d/pid")" 2>/dev/null || break
		sleep 0.1
	done
	cl_log "manager $name did not start (CL_MANAGER_WAIT=${CL_MANAGER_WAIT:-socket}); log follows"
	tail -20 "$d/log" >&2
	return 1
}

# cl_manager_outage NAME SECS START_CMD...: kill -9 of the manager NAME, left
# down SECS seconds, then START_CMD starts it again. The sleep is deliberate:
# a manager away for a while is what the callers test (nothing it should do
# happens meanwhile; the new one picks up where the old one stood).
cl_manager_outage() {
	local name=$1 secs=$2
	shift 2
	cl_stop "$name" KILL
	sleep "$secs"
	"$@"
}

cl_stop_all() {
	local d m
	# Managers first: none of them acts on the daemons going away.
	if [ -f "$CL_DIR/managers" ]; then
		while read -r m; do cl_stop "$m"; done <"$CL_DIR/managers"
	fi
	for d in "$CL_DIR"/serve-* "$CL_DIR"/node "$CL_DIR"/controller "$CL_DIR"/storage-*; do
		[ -d "$d" ] && cl_stop "$(basename "$d")"
	done
	cl_stop etcd
	cl_ports_release
}

# cl_e2e_begin NAME BUILD_DIR [NODES] [--heal on|off]: the common start of an
# e2e script: private state dir under BUILD_DIR (removed on exit unless
# KEEP=1), etcd, the cluster manager (cl_start_manager: a zipline-controller
# --manager=on, grace 2 s, down-out $CL_DOWN_OUT or 30 s; CL_MANAGER=0 starts
# none) and NODES (default 3) storage daemons. Storage heals by default;
# --heal off (or on) is passed to zipline-storage, also on restarts through
# cl_start_storage. ZIPLINE_ETCD is exported, $ZL set.
cl_e2e_begin() {
	local name=$1 nodes=${3:-3}
	if [ "${4:-}" = --heal ]; then
		case "${5:-}" in
		on | off) CL_STORAGE_FLAGS="${CL_STORAGE_FLAGS:-} --heal ${5}" ;;
		*) cl_log "cl_e2e_begin: --heal wants on or off, got '${5:-}'"; return 1 ;;
		esac
	fi
	BUILD=$(cd "$2" && pwd)
	export CL_BIN=$BUILD/bin
	CL_DIR=$(mktemp -d "$BUILD/$name.XXXXXX")
	export CL_DIR
	ZL="$CL_BIN/zl"
	trap 'cl_stop_all; [ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"' EXIT
	cl_start_etcd || return 1
	export ZIPLINE_ETCD=$CL_ETCD
	if [ "${CL_TLS:-off}" = on ]; then
		cl_tls_make || return 1
	fi
	if [ "${CL_MANAGER:-1}" != 0 ]; then
		cl_start_manager || return 1
	fi
	for i in $(seq 1 "$nodes"); do cl_start_storage "$i"; done
	cl_wait_nodes "$nodes"
}

# cl_chunk_files: chunk files (live and snapshot clones) on every daemon.
cl_chunk_files() { find "$CL_DIR"/storage-*/data/chunks -name '*.zlc' 2>/dev/null | wc -l; }
# cl_vol_keys: etcd keys of volumes, names, snapshots, dependants,
# tombstones, snapshot requests and attachments (what a volume, snapshot or
# clone leaves) under /zipline/.
cl_vol_keys() {
	local k n total=0
	for k in volumes names snapshots snapnames dependants deletes snapreqs snapwriters attachments; do
		n=$(curl -s -m 2 -X POST -d "{\"key\":\"$(printf '/zipline/%s/' "$k" | base64)\",\"range_end\":\"$(printf '/zipline/%s0' "$k" | base64)\",\"count_only\":true}" \
			"$CL_ETCD/v3/kv/range" | sed -n 's/.*"count":"\([0-9]*\)".*/\1/p')
		total=$((total + ${n:-0}))
	done
	echo "$total"
}
# cl_wait_leak_free FILES KEYS SECS: until cl_chunk_files and cl_vol_keys
# are back to FILES and KEYS (what a test counted before it made anything);
# 1 after SECS.
cl_wait_leak_free() {
	local end=$((SECONDS + $3))
	until [ "$(cl_chunk_files)" = "$1" ] && [ "$(cl_vol_keys)" = "$2" ]; do
		((SECONDS < end)) || return 1
		sleep 0.2
	done
}

# cl_rows VOL_ID: one line per slice of the volume's record in etcd,
# "slice v term node:state..." (states in_sync, recovering, out), read
# through the etcd JSON gateway (test/lib/heal_tool.py etcd ... rows), not
# through lib/meta.
cl_rows() { /usr/bin/python3 "$CL_LIB/heal_tool.py" etcd "$CL_ETCD" rows "$1"; }

# cl_etcd_get KEY: the value of KEY (nothing when absent), through the etcd
# JSON gateway (test/lib/etcd_gw.py).
cl_etcd_get() { /usr/bin/python3 "$CL_LIB/heal_tool.py" etcd "$CL_ETCD" get "$1"; }

# cl_wait_in_sync VOL_ID NODE SECONDS: the one in-sync waiter of the tests
# (test/lib/heal_tool.py etcd ... wait): polls the volume's rows every 0.1 s
# until NODE is in_sync in every row that lists it; prints the states NODE
# went through ("recovering in_sync") on stdout.
# cl_wait_in_sync VOL_ID --all N SECONDS: until every row has N members, all
# in_sync; prints the milliseconds it waited.
# Both return 1 on timeout (or when no row lists NODE), with the rows not in
# sync on stderr.
cl_wait_in_sync() {
	/usr/bin/python3 "$CL_LIB/heal_tool.py" etcd "$CL_ETCD" wait "$@"
}

# cl_wait_journal_clean SECONDS: until every storage daemon on the journal
# write path reports (status record) that its chunk files hold everything its
# journal does: what an oracle that reads chunk files from disk needs first.
# Prints the milliseconds waited; 1 on timeout.
cl_wait_journal_clean() {
	/usr/bin/python3 "$CL_LIB/heal_tool.py" etcd "$CL_ETCD" journal-clean "$1"
}

# cl_chunk_block_off FILE BLOCK [BYTE]: file offset of byte BYTE of data block
# BLOCK of a chunk replica file (test/lib/chunkfile.py reads its header).
cl_chunk_block_off() {
	/usr/bin/python3 "$CL_LIB/heal_tool.py" blockoff "$1" "$2" "${3:-0}"
}

# cl_flip_byte FILE OFFSET: inverts one byte in place (and fsyncs).
cl_flip_byte() {
	/usr/bin/python3 - "$1" "$2" <<'PY'
import os, sys
path, off = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR)
b = os.pread(fd, 1, off)
os.pwrite(fd, bytes([b[0] ^ 0xff]), off)
os.fsync(fd)
os.close(fd)
PY
}
