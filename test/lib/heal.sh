# Sourced after test/lib/cluster.sh by the heal tests (thrash_e2e.sh,
# divergence_e2e.sh, delta_e2e.sh, heal_e2e.sh, peering_e2e.sh,
# peering_manager_e2e.sh, recover_hot_e2e.sh, scrub_e2e.sh, emptydisk_e2e.sh):
# the manager process, the etcd oracle of slice rows (and the manager by
# hand), and the replica oracle (every replica's chunk files read directly,
# without the storage daemons; test/lib/heal_tool.py). Needs CL_DIR,
# CL_ETCD, CL_BIN (cl_e2e_begin sets them). Every function returns non-zero
# and says why on stderr when it cannot do its job.

HL_PY=/usr/bin/python3
HL_TOOL=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/heal_tool.py

hl_log() { printf '[heal] %s\n' "$*" >&2; }

# hl_now_ms: wall clock in milliseconds.
hl_now_ms() { echo $(($(date +%s%N) / 1000000)); }

# hl_start_manager: the manager of the heal tests: cl_start_manager
# (test/lib/cluster.sh) named "manager", grace 2 s, down-out 3600 s, plus
# $HL_MANAGER_FLAGS. cl_stop_all stops it.
hl_start_manager() {
	HL_MGR=manager
	# shellcheck disable=SC2086 # the flags are words
	CL_MANAGER_GRACE=2 CL_DOWN_OUT=3600 cl_start_manager manager ${HL_MANAGER_FLAGS:-}
}

# hl_kill_manager: kill -9 of the manager started by hl_start_manager.
hl_kill_manager() { cl_stop "${HL_MGR:-manager}" KILL; }

# hl_etcd CMD ARGS...: the row oracle and the manager by hand, straight from
# etcd (JSON gateway), through test/lib/heal_tool.py (its head lists every
# command), e.g.:
#   rows VOL             "slice v term node:state..." per row
#   primary VOL SLICE    node id of the slice's primary (first in-sync member)
#   insync VOL N         exit 0 when every row has N members in_sync
#   summary VOL          "rows=R all_in_sync_rows=K member_states=..."
#   reports VOL [ERROR]  "slice reporter peer error slice_ver revision"
#   set VOL NODE STATE   every row holding NODE: NODE -> STATE (CAS)
#   order VOL SLICE N... the row's members in that order
hl_etcd() { "$HL_PY" "$HL_TOOL" etcd "$CL_ETCD" "$@"; }

# hl_wait_caught_up VID NODE N SECS: polls every 0.1 s until N slices of VID
# reported NODE CAUGHT_UP (hl_etcd reports); prints how many did. Non-zero
# when fewer after SECS.
hl_wait_caught_up() {
	local vid=$1 node=$2 n=$3 secs=$4 got=0
	for _ in $(seq 1 $((secs * 10))); do
		got=$(hl_etcd reports "$vid" CAUGHT_UP | awk -v n="$node" '$3 == n' | wc -l)
		[ "$got" -ge "$n" ] && break
		sleep 0.1
	done
	echo "$got"
	[ "$got" -ge "$n" ]
}

# hl_wait_peered VID NODE OFFSET SECS: a restarted daemon peers every slice
# it is the primary of; polls every 0.1 s until NODE's log after byte OFFSET
# (its size before the restart) has the end-of-peering line of each of them,
# so that damage done next is not healed by that peering. Non-zero, with the
# slices missing on stderr, after SECS.
hl_wait_peered() {
	local vid=$1 node=$2 off=$3 secs=$4 log="$CL_DIR/storage-${2#node-}/log" want missing
	want=$(hl_etcd members "$vid" | awk -v n="$node" '$2 == n {print $1}')
	for _ in $(seq 1 $((secs * 10))); do
		missing=$(tail -c +$((off + 1)) "$log" | grep -o "peering vol=$vid slice=[0-9]* term=" |
			sed 's/.*slice=\([0-9]*\) .*/\1/' | sort -u | comm -13 - <(echo "$want" | sort -u))
		[ -z "$missing" ] && return 0
		sleep 0.1
	done
	echo "$node did not peer slices $(echo $missing) of $vid within ${secs} s" >&2
	return 1
}

# hl_vol_id NAME: the volume id (vol-<16 hex>) of a volume.
hl_vol_id() {
	"$ZL" volume inspect "$1" | grep -o 'vol-[0-9a-f]\{16\}' | head -1
}

# hl_files CHUNK [--missing-ok] DIR...: per chunk file of each replica dir:
# storage index, file name, sha256 of the data part (chunk bytes at the
# header's data offset, zeros past the end: storage/storage_chunk.h), chunk
# version (the highest of the metadata slots). A missing dir is an error
# unless --missing-ok. (heal_tool.py files first waits until the journal
# of each dir's running daemon holds no record past its checkpoint, read
# from the journal file: the versions are then current.)
hl_files() { "$HL_PY" "$HL_TOOL" files "$@"; }

# hl_divergent FILE BLOCK BYTE: inverts one byte of a data block and rewrites
# its crc in the current metadata slot: a copy that verifies but holds other
# data at the same version.
hl_divergent() { "$HL_PY" "$HL_TOOL" divergent "$@"; }

# hl_replicas_identical VID CHUNK NCHUNKS [NODES]: the replica oracle: every
# storage dir (1..NODES, default 3) holds a file for every chunk the others
# hold, with the same data sha256 and version. Prints a FIGURE line;
# non-zero with the first differences on stderr.
hl_replicas_identical() {
	local vid=$1 cs=$2 nchunks=$3 nodes=${4:-3} dirs=() i bad n3 nd nv
	for i in $(seq 1 "$nodes"); do dirs+=("$CL_DIR/storage-$i/data/chunks/$vid"); done
	hl_files "$cs" "${dirs[@]}" >"$CL_DIR/replica-files" || return 1
	# kind: "data" (sha differs or a copy is missing) or "version" (same data).
	bad=$(awk -v want="$nodes" '{k = $2; d[k] = d[k] " " $1 "=" substr($3, 1, 12) "/" $4; h[k] = h[k] " " $3; s[k] = s[k] " " $3 "/" $4; n[k]++}
		END {for (k in d) {split(s[k], a, " "); split(h[k], b, " "); dv = 0; dd = 0
			for (i in a) {if (a[i] != a[1]) dv = 1; if (b[i] != b[1]) dd = 1}
			if (dd || n[k] != want) print "data", k, n[k] " copies:", d[k]
			else if (dv) print "version", k, n[k] " copies:", d[k]}}' "$CL_DIR/replica-files" | sort)
	n3=$(awk '{n[$2]++} END {c = 0; for (k in n) c++; print c}' "$CL_DIR/replica-files")
	nd=$(echo "$bad" | grep -c '^data ')
	nv=$(echo "$bad" | grep -c '^version ')
	echo "FIGURE: replica oracle: $n3 chunk files (of $nchunks chunks) on $nodes replicas: $nd differ in data, $nv only in version"
	if [ -n "$bad" ]; then
		hl_log "replicas differ in $((nd + nv)) of $n3 chunks (kind chunk copies node=sha/version); first ones:"
		{ echo "$bad" | grep '^data ' | head -5; echo "$bad" | grep '^version ' | head -3; } >&2
		return 1
	fi
}

# hl_check_replicas LOG SIZE CHUNK VID [--exact]: e2e_load's check of every
# replica's chunk files against the write log (old-or-new rule, or exact).
hl_check_replicas() {
	local log=$1 size=$2 cs=$3 vid=$4 i rc=0
	shift 4
	for i in 1 2 3; do
		"$CL_BIN/e2e_load" check --log "$log" --chunk-dir "$CL_DIR/storage-$i/data/chunks/$vid" \
			--size "$size" --chunk-size "$cs" "$@" || { hl_log "replica on node-$i does not hold what the log allows"; rc=1; }
	done
	return $rc
}

# hl_verify NAME: `zl volume verify NAME` (the operator's oracle, REPLICATION.md
# §8). Non-zero when it is missing or reports a difference.
hl_verify() {
	local out rc=0
	out=$("$ZL" volume verify "$1" 2>&1) || rc=$?
	if echo "$out" | grep -q "unknown volume subcommand"; then
		hl_log "zl volume verify not available (this build's zl: $out)"
		return 2
	fi
	echo "$out" | tail -5 | sed 's/^/[heal] verify: /' >&2
	[ "$rc" = 0 ] || hl_log "zl volume verify $1 exited $rc"
	return $rc
}

# hl_recovery_bytes SINCE_FILE: bytes and chunks copied by recovery, summed
# over the "recovery caught up ... bytes_copied=" lines (storage_heal.c)
# of every storage log written after the offsets saved by hl_log_mark.
hl_log_mark() {
	local f
	: >"$1"
	for f in "$CL_DIR"/storage-*/log; do echo "$f $(stat -c %s "$f" 2>/dev/null || echo 0)" >>"$1"; done
}
hl_log_since() {
	local f off
	while read -r f off; do tail -c +$((off + 1)) "$f"; done <"$1"
}
hl_recovery_bytes() {
	hl_log_since "$1" | grep 'recovery caught up' |
		awk '{for (i = 1; i <= NF; i++) {if ($i ~ /^bytes_copied=/) {split($i, a, "="); b += a[2]}
			if ($i ~ /^chunks_copied=/) {split($i, a, "="); c += a[2]}}; n++}
			END {print b + 0, c + 0, n + 0}'
}

# hl_dump_logs: the tail of every daemon and manager log (for failures).
hl_dump_logs() { cl_dump_logs "${1:-25}" "$CL_DIR"/storage-*/log "$CL_DIR"/controller/log "$CL_DIR"/manager/log; }

# hl_begin NAME BUILD_DIR: the common start of the heal acceptance tests:
# checks the binaries, etcd and 3 zipline-storage --heal on (recovery rate
# unlimited for the test, info logs for the recovery figures, plus
# $HL_STORAGE_FLAGS), the manager; background PIDs put in HL_PIDS are killed
# on exit. Sets BUILD, CL_BIN, CL_DIR, ZL.
HL_PIDS=""
hl_begin() {
	local name=$1 b
	for b in zipline-storage zipline-controller zl e2e_load; do
		[ -x "$2/bin/$b" ] || { hl_log "no $2/bin/$b: build it first"; return 1; }
	done
	command -v etcd >/dev/null || { hl_log "etcd is not installed"; return 1; }
	[ -x "$HL_PY" ] || { hl_log "$HL_PY is missing"; return 1; }
	export CL_STORAGE_FLAGS="--recovery-mbps 8000 --log-level info ${HL_STORAGE_FLAGS:-}"
	# cluster.sh may start a manager of its own (CL_MANAGER): ours has the
	# test's timings and is started after the daemons, as in production.
	CL_MANAGER=0 cl_e2e_begin "$name" "$2" 3 --heal on || return 1
	trap 'hl_cleanup' EXIT
	hl_start_manager || return 1
}
hl_cleanup() {
	local p
	for p in $HL_PIDS; do kill -KILL "$p" 2>/dev/null; done
	cl_stop_all
	[ "${KEEP:-0}" = 1 ] && echo "[heal] state kept in $CL_DIR" >&2
	[ "${KEEP:-0}" = 1 ] || rm -rf "$CL_DIR"
}

# hl_rows_only_by_manager CLIENT_LOG...: the heal-mode rule "only the manager
# changes rows": no client promoted a primary (zl_meta_slice_drop, 0.1
# behaviour: "promoted new primary" / "cannot promote") and no daemon dropped
# a backup itself ("dropped backup from the in-sync set"). Prints the first
# offending lines and returns non-zero.
hl_rows_only_by_manager() {
	local hits
	hits=$({ grep -h -E 'promoted new primary|cannot promote a new primary' "$@" 2>/dev/null
		grep -h 'dropped backup from the in-sync set' "$CL_DIR"/storage-*/log 2>/dev/null; } | head -200)
	[ -z "$hits" ] && return 0
	hl_log "$(echo "$hits" | wc -l) row changes made by a client or a primary, not by the manager; first:"
	echo "$hits" | head -3 | cut -c1-300 >&2
	return 1
}

# hl_test NAME [--manager-restart]: the frame of a heal acceptance test:
# T=NAME (NAME[manager-restart] and MGR_RESTART=1 with --manager-restart),
# FAILS=(), fail MSG (logs, exit 1), check_fail MSG (recorded; hl_end fails).
hl_test() {
	T=$1
	MGR_RESTART=0
	[ "${2:-}" = --manager-restart ] && { MGR_RESTART=1; T="$1[manager-restart]"; }
	FAILS=()
	fail() {
		echo "$T: FAIL: $*" >&2
		hl_dump_logs 30
		exit 1
	}
	check_fail() { echo "$T: CHECK FAILED: $*" >&2; FAILS+=("$*"); }
}

# hl_load_begin NAME SIZE CHUNK MAX_LEN: a 3-replica volume NAME and a
# verified writer on it (e2e_load: QD8, 20 % reads, 4 KiB..MAX_LEN, seed
# $SEED, --final-check, stop file $CL_DIR/stop): sets vid, LOG (the log of
# acknowledged writes) and load (its pid, in HL_PIDS; output in
# $CL_DIR/load.out, .err), and waits for its first 100 acknowledged writes.
# Stopped and checked by hl_load_stop.
hl_load_begin() {
	"$ZL" volume create "$1" --size "$2" --replicas 3 --chunk-size "$3" || fail "volume create $1"
	vid=$(hl_vol_id "$1")
	[ -n "$vid" ] || fail "no volume id in 'zl volume inspect $1'"
	LOG=$CL_DIR/load.log
	"$CL_BIN/e2e_load" write --etcd "$CL_ETCD" --volume "$1" --log "$LOG" --qd 8 --seed "$SEED" \
		--read-pct 20 --min-len 4K --max-len "$4" --stop-file "$CL_DIR/stop" --final-check \
		>"$CL_DIR/load.out" 2>"$CL_DIR/load.err" &
	load=$!
	HL_PIDS="$HL_PIDS $load"
	cl_wait_count "$LOG" '^A ' 100 30 || { cat "$CL_DIR/load.err" >&2; fail "the load did not get 100 writes acknowledged"; }
	kill -0 "$load" 2>/dev/null || { cat "$CL_DIR/load.err" >&2; fail "the load generator died at start"; }
}

# hl_load_stop PID OUT ERR WHAT [--final-check]: stops an e2e_load writer
# started with --stop-file "$CL_DIR/stop" (touches it, waits up to 120 s)
# and checks its summary in OUT, each a check_fail naming WHAT: it stopped,
# no failed write, read error or bad sector, exit 0, and with --final-check
# (the writer's flag) its read-back of the volume clean. Prints the summary
# as a FIGURE and the first error lines of ERR.
hl_load_stop() {
	local pid=$1 out=$2 err=$3 what=$4 rc=0
	touch "$CL_DIR/stop"
	for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
	kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; check_fail "$what: the load generator did not stop within 120 s of the stop file (I/O hung)"; }
	wait "$pid" || rc=$?
	grep -E 'failed|BAD|never' "$err" | head -10 >&2
	cat "$out"
	sed -n "s/^LOAD: /FIGURE: $what: /p" "$out"
	grep -q '^LOAD: .* failed=0 .*read_errors=0 bad_sectors=0' "$out" ||
		check_fail "$what: the load saw failed writes, read errors or bad sectors: $(grep '^LOAD:' "$out" || echo 'no LOAD line'); first errors: $(grep -m 3 -E 'failed|BAD' "$err" | tr '\n' ' ')"
	if [ "${5:-}" = --final-check ]; then
		grep -q '^CHECK: source=volume bad_sectors=0 read_error=none' "$out" ||
			check_fail "$what: final read-back of the load: $(grep '^CHECK:' "$out" || echo 'not run')"
	fi
	[ "$rc" = 0 ] || check_fail "$what: e2e_load write exited $rc"
}

# hl_end_oracles NAME VID SIZE_B CHUNK_B LOG --exact|--allowed CLIENT_ERR...:
# the closing oracles of the heal tests, each a check_fail: only the manager
# changed rows (CLIENT_ERR: the clients' stderr), `zl volume verify NAME`,
# the 3 replicas' chunk files identical, and each replica's files exactly
# what the acknowledged writes of LOG wrote (--exact) or what LOG allows
# (--allowed: unacknowledged writes may or may not have landed).
hl_end_oracles() {
	local name=$1 vid=$2 size=$3 cs=$4 log=$5 mode=$6 vrc=0
	shift 6
	hl_rows_only_by_manager "$@" ||
		check_fail "a client or a primary changed a slice row itself (heal mode: only the manager changes rows; they report and wait)"
	hl_verify "$name" || vrc=$?
	if [ $vrc = 2 ]; then
		check_fail "zl volume verify not available"
	elif [ $vrc != 0 ]; then
		check_fail "zl volume verify $name exited $vrc"
	fi
	hl_replicas_identical "$vid" "$cs" $((size / cs)) || check_fail "replica oracle: the 3 replicas' chunk files differ"
	if [ "$mode" = --exact ]; then
		hl_check_replicas "$log" "$size" "$cs" "$vid" --exact ||
			check_fail "replica oracle: a replica's chunk files are not what the acknowledged writes wrote"
	else
		hl_check_replicas "$log" "$size" "$cs" "$vid" ||
			check_fail "replica oracle: a replica's chunk files hold content the log does not allow"
	fi
}

# hl_load_end NAME SIZE_B CHUNK_B WHAT: the end of a test begun with
# hl_load_begin NAME: the writer stopped and checked (hl_load_stop), every
# slice 3/3 in sync, the closing oracles (hl_end_oracles --exact) and a new
# client reading exactly the log; then the verdict (hl_end).
hl_load_end() {
	hl_load_stop "$load" "$CL_DIR/load.out" "$CL_DIR/load.err" "$4" --final-check
	hl_etcd insync "$vid" 3 || check_fail "after the load stopped not every slice is 3/3 in sync: $(hl_etcd summary "$vid")"
	hl_end_oracles "$1" "$vid" "$2" "$3" "$LOG" --exact "$CL_DIR/load.err"
	"$CL_BIN/e2e_load" check --etcd "$CL_ETCD" --volume "$1" --log "$LOG" --exact ||
		check_fail "a new client reads content that is not what the acknowledged writes wrote"
	hl_end
}

# hl_end: the verdict: every check_fail listed (and the logs) and exit 1, or
# "$T: PASS".
hl_end() {
	if [ ${#FAILS[@]} -gt 0 ]; then
		hl_dump_logs 30
		echo "$T: FAIL: ${#FAILS[@]} checks failed:" >&2
		printf '  - %s\n' "${FAILS[@]}" >&2
		exit 1
	fi
	echo "$T: PASS"
}
