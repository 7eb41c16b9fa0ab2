#!/usr/bin/env bash
# Acceptance test of issue 11 over TCP (docs/SECURITY.md, the contract): an
# outsider speaking the wire protocol by hand (e2e_outsider, lib/wire only)
# against EVERY storage daemon of a 3-node cluster started with --auth on.
#
# The test plays ControllerPublish itself, through the etcd JSON gateway
# (as csi-controller/ctrl_publish.c and ctrl_secret.c do): the volume secret
# <prefix>secrets/<vol-id> (64 hex, create-if-absent) and the attachment
# record <prefix>attachments/<vol-id> = {"node","epoch","readonly","time"}
# whose epoch is the record's create_revision. Tokens are computed here with
# python3 hmac, independently of the code under test.
#
# Volume A is attached to k8s-worker-1 twice (epoch E1, unpublished, then E2:
# the E1 token is an old attachment's); volume B read-only to k8s-worker-2.
# Against every daemon, with no HELLO, no token, a wrong token, B's token,
# the E1 token, a client token with the cluster bit and a cluster token of a
# wrong key: every read, write, discard, repl-write, chunk-push,
# chunk-delete and volume-delete is refused (ZL_ERR_AUTH / ZL_ERR_STALE, or
# the connection closed after a refused HELLO), and the oracle checks that
# nothing landed or went away: `zl volume export` compared byte for byte,
# `zl volume verify` (every in-sync copy equal), the chunk files on disk.
# Positive: A's E2 token reads and writes A (also reads A's backup copies
# with ZL_WF_ANY, the read around a bad copy) but not B nor any storage or
# admin opcode; B's read-only token reads B and cannot write it; a cluster
# token (from <prefix>keys/cluster) reads with ZL_WF_ANY. Last, epoch
# 2^64-1 from the outsider and from the valid client does not fence the real
# client, also after a daemon restart (the persisted epoch).
#
# ZL_OUTSIDER_AUTH_FLAG (default "--auth on") is what the daemons get; set it
# empty only to show, on a build without authentication, what the outsider
# can do there (the test fails then, and says what was breached).
# ZL_OUTSIDER_TRANSPORT=rdma (test/rdma/security_rdma.sh, in the Soft-RoCE
# VM) runs the same scenario over RDMA: the daemons listen on
# ZL_OUTSIDER_HOST (an rxe0 address) with --transport rdma, zl uses RDMA, and
# e2e_outsider carries its hand-made headers over the RDMA transport; the
# daemons' logs must show RDMA connections. ZL_OUTSIDER_NODES (default
# "1 2 3") lists the daemons attacked.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/test/lib/cluster.sh"
PY=/usr/bin/python3
T=outsider_e2e
fail() {
	echo "$T: FAIL: $*" >&2
	cl_dump_logs 15 "$CL_DIR"/storage-*/log
	exit 1
}
AUTH_FLAG=${ZL_OUTSIDER_AUTH_FLAG---auth on}
XPORT=${ZL_OUTSIDER_TRANSPORT:-tcp}
# The daemons the outsider attacks (all three by default; the RDMA run in
# the VM, where every process start is slow, attacks node-1 only). Node 1
# is always restarted at the end.
NODES=${ZL_OUTSIDER_NODES:-1 2 3}
# Of those, the ones that get every credential against every opcode and the
# positive and binding cases (default: all). The others (the VM's nodes 2
# and 3) get the core of it: no HELLO, a wrong token, another volume's token
# and the old attachment's token against a read, a write, a forward, a chunk
# delete and a volume delete, and the huge epochs.
FULL=${ZL_OUTSIDER_FULL_NODES:-$NODES}
in_full() { [[ " $FULL " == *" $1 "* ]]; }
HOST=${ZL_OUTSIDER_HOST:-127.0.0.1}
export CL_STORAGE_FLAGS="$AUTH_FLAG --log-level info"
case $XPORT in
tcp) ;;
rdma)
	export CL_STORAGE_FLAGS="$CL_STORAGE_FLAGS --transport rdma" CL_LISTEN_HOST=$HOST
	export ZIPLINE_TRANSPORT=rdma ZL_OUTSIDER_TRANSPORT=rdma
	;;
*) echo "$T: FAIL: ZL_OUTSIDER_TRANSPORT is tcp or rdma, not '$XPORT'" >&2; exit 1 ;;
esac
CHUNK=65536
N_CHUNKS=16
if ! cl_e2e_begin e2e-outsider "$1" 3; then
	for i in 1 2 3; do
		pid=$(cl_pid storage-$i)
		if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
			echo "$T: zipline-storage node-$i exited at start with '$AUTH_FLAG'" \
				"(a build without data-path authentication refuses the flag):" >&2
			tail -3 "$CL_DIR/storage-$i/log" >&2
		fi
	done
	fail "the cluster did not start with '$AUTH_FLAG'"
fi
trap 'exit 143' TERM INT # the EXIT trap of cl_e2e_begin stops the daemons
OUT="$CL_BIN/e2e_outsider"
[ -x "$OUT" ] || fail "$OUT is missing (built with the e2e tests)"
[ -n "$AUTH_FLAG" ] || echo "$T: WARNING: daemons run without '--auth on'" \
	"(ZL_OUTSIDER_AUTH_FLAG is empty): this run shows the breaches of an open cluster" >&2

# etcd_tool CMD ARGS (etcd JSON gateway, prefix /zipline/):
#   secret VID             create-if-absent the volume secret; prints the stored one
#   attach VID NODE RO     ControllerPublish's record (epoch = create_revision); prints it
#   detach VID             ControllerUnpublish: deletes the record
#   clusterkey             prints the key of <prefix>keys/cluster, empty when absent
#   hmac HEXKEY MSG        hex HMAC-SHA256 keyed with the raw bytes of HEXKEY
#   patch FILE OFF LEN B   writes LEN bytes B at OFF of FILE (the oracle's copy)
etcd_tool() {
	"$PY" - "$CL_ETCD" "$SRC/test/lib" "$@" <<'PY'
import base64, hashlib, hmac, json, os, sys, time
sys.path.insert(0, sys.argv[2])
from etcd_gw import b64, get as gw_get, call as gw_call
etcd, cmd, args = sys.argv[1], sys.argv[3], sys.argv[4:]
call = lambda path, body: gw_call(etcd, path, body)
get = lambda key: gw_get(etcd, key)
def put_if_absent(key, value):
    txn = {'compare': [{'key': b64(key), 'target': 'CREATE', 'result': 'EQUAL',
                        'create_revision': '0'}],
           'success': [{'request_put': {'key': b64(key), 'value': b64(value)}}]}
    r = call('/v3/kv/txn', txn)
    return bool(r.get('succeeded')), int(r['header']['revision'])
if cmd == 'secret':
    key = '/zipline/secrets/' + args[0]
    put_if_absent(key, os.urandom(32).hex())
    print(base64.b64decode(get(key)['value']).decode())
elif cmd == 'attach':
    vid, node, ro = args[0], args[1], args[2] == '1'
    key = '/zipline/attachments/' + vid
    rev = int(call('/v3/kv/range', {'key': b64(key)})['header']['revision'])
    rec = lambda e: json.dumps({'node': node, 'epoch': e, 'readonly': ro,
                                'time': int(time.time())}, separators=(',', ':'))
    ok, got = put_if_absent(key, rec(rev + 1))
    if not ok:
        sys.exit('attach: %s is already attached' % vid)
    kv = get(key)
    epoch = int(kv['create_revision'])
    if epoch != rev + 1:  # another write took the guessed revision: correct it
        txn = {'compare': [{'key': b64(key), 'target': 'MOD', 'result': 'EQUAL',
                            'mod_revision': kv['mod_revision']}],
               'success': [{'request_put': {'key': b64(key), 'value': b64(rec(epoch))}}]}
        call('/v3/kv/txn', txn)
    print(epoch)
elif cmd == 'detach':
    call('/v3/kv/deleterange', {'key': b64('/zipline/attachments/' + args[0])})
elif cmd == 'clusterkey':
    kv = get('/zipline/keys/cluster')
    print(json.loads(base64.b64decode(kv['value'])).get('key', '') if kv else '')
elif cmd == 'hmac':
    print(hmac.new(bytes.fromhex(args[0]), args[1].encode(), hashlib.sha256).hexdigest())
elif cmd == 'patch':
    with open(args[0], 'r+b') as f:
        f.seek(int(args[1]))
        f.write(bytes([int(args[3], 0)]) * int(args[2]))
PY
}
# The helpers run once or more per request (~170 requests): bash builtins
# only, no cat or awk, since every program start costs 0.1-0.3 s in the VM
# (rdma_vm, part security).
outsider() { # outsider NODE SETTINGS/STEPS...
	local port
	read -r port <"$CL_DIR/storage-$1/port"
	shift
	"$OUT" "$HOST" "$port" --wait 5000 "$@"
}
vid_of() { "$ZL" volume inspect "$1" | grep -o 'vol-[0-9a-f]\{16\}' | head -1; }

# --- volumes with known data, written by zl as operator -------------------
for v in a b; do
	"$ZL" volume create "out$v" --size $((N_CHUNKS * CHUNK / 1024))K --replicas 3 \
		--chunk-size 64K >/dev/null || fail "zl volume create out$v (as operator)"
	head -c $((N_CHUNKS * CHUNK)) /dev/urandom >"$CL_DIR/want_$v"
	"$ZL" volume import "out$v" "$CL_DIR/want_$v" >/dev/null ||
		fail "zl volume import out$v (as operator)"
done
VA=$(vid_of outa)
VB=$(vid_of outb)
[ -n "$VA" ] && [ -n "$VB" ] || fail "no volume id in 'zl volume inspect' output"
cl_rows "$VA" >"$CL_DIR/rows_a" || fail "cannot read the rows of $VA"
cl_rows "$VB" >"$CL_DIR/rows_b" || fail "cannot read the rows of $VB"
# lead ROWS NODE / back ROWS NODE: "slice v" of a row NODE leads (first
# in_sync member) / is an in-sync backup of. Chunk = slice (one chunk each).
lead() {
	awk -v n="node-$2" '{ for (i = 4; i <= NF; i++) if ($i ~ /:in_sync$/) { split($i, a, ":");
		if (a[1] == n) { print $1, $2; exit } break } }' "$1"
}
back() {
	awk -v n="node-$2" '{ p = ""; for (i = 4; i <= NF; i++) if ($i ~ /:in_sync$/) { split($i, a, ":");
		if (p == "") p = a[1]; else if (a[1] == n) { print $1, $2; exit } } }' "$1"
}
for i in 1 2 3; do
	read -r LA[i] SA_V[i] <<<"$(lead "$CL_DIR/rows_a" "$i")"
	read -r BA[i] SB_V[i] <<<"$(back "$CL_DIR/rows_a" "$i")"
	read -r LB[i] LB_V[i] <<<"$(lead "$CL_DIR/rows_b" "$i")"
	[ -n "${LA[i]}" ] && [ -n "${BA[i]}" ] && [ -n "${LB[i]}" ] ||
		fail "node-$i leads no row or backs none of the volumes (rows: $(head -4 "$CL_DIR/rows_a"))"
done

# --- ControllerPublish played by hand ---------------------------------------
SECA=$(etcd_tool secret "$VA") && SECB=$(etcd_tool secret "$VB") || fail "cannot write the secrets"
[ ${#SECA} = 64 ] && [ ${#SECB} = 64 ] || fail "volume secrets are not 64 hex"
E1=$(etcd_tool attach "$VA" k8s-worker-1 0) || fail "attach $VA (epoch 1)"
OLDTOK=$(etcd_tool hmac "$SECA" "$VA|k8s-worker-1|$E1")
etcd_tool detach "$VA" || fail "detach $VA"
E2=$(etcd_tool attach "$VA" k8s-worker-1 0) || fail "attach $VA (epoch 2)"
TOKA=$(etcd_tool hmac "$SECA" "$VA|k8s-worker-1|$E2")
EB=$(etcd_tool attach "$VB" k8s-worker-2 1) || fail "attach $VB read-only"
TOKB=$(etcd_tool hmac "$SECB" "$VB|k8s-worker-2|$EB")
BADKEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
WRONG=$(etcd_tool hmac "$BADKEY" "$VA|k8s-worker-1|$E2")
echo "$T: A=$VA (attached to k8s-worker-1, old epoch $E1, epoch $E2), B=$VB (read-only, epoch $EB)"
[ "$E2" -gt "$E1" ] || fail "the second attachment's epoch $E2 is not above the first's $E1"
CA=(--vol "$VA" --epoch "$E2" --node k8s-worker-1 --token "$TOKA")
CB=(--vol "$VB" --epoch "$EB" --node k8s-worker-2 --token "$TOKB")

# --- oracle -------------------------------------------------------------------
declare -A CHECKS BREACHES SAID
BAD=0
breach() { # breach NODE WHAT
	echo "$T: BREACH on node-$1: $2" >&2
	BREACHES[$1]=$((${BREACHES[$1]:-0} + 1))
	BAD=1
}
check() { CHECKS[$1]=$((${CHECKS[$1]:-0} + 1)); }
# status_of OUTPUT STEP: the status word (second word) of STEP's line (the
# first line whose first word is STEP); nothing when there is none.
status_of() {
	local w1 w2
	while read -r w1 w2 _; do
		[ "$w1" = "$2" ] && { printf '%s\n' "$w2"; return 0; }
	done <<<"$1"
	return 0
}
# refused NODE LABEL HELLO_WANT OUTPUT STEP: STEP's line must be a refusal;
# HELLO_WANT is the HELLO status the contract asks ("-": no HELLO was sent).
refused() {
	local n=$1 label=$2 hwant=$3 out=$4 step=$5 hs st
	hs=$(status_of "$out" hello)
	st=$(status_of "$out" "$step")
	check "$n"
	# The HELLO's verdict once per daemon and credential.
	if [ "$hwant" != - ] && [ "$hs" != "$hwant" ] && [ -z "${SAID[$n $label]:-}" ]; then
		SAID[$n $label]=1
		case "$hs" in
		OK) breach "$n" "$label: HELLO ACCEPTED (OK), the contract says $hwant" ;;
		*) breach "$n" "$label: HELLO answered '${hs:-nothing}', the contract says $hwant" ;;
		esac
	fi
	case "$st" in
	ZL_ERR_AUTH | ZL_ERR_STALE) return 0 ;;
	CLOSED) [ "$hwant" != - ] && [ "$hs" != OK ] && return 0 ;;
	esac
	case "$st" in
	OK) breach "$n" "$label: $step was SERVED ($(grep "^$step " <<<"$out" | head -1))" ;;
	*) breach "$n" "$label: $step answered '${st:-nothing}': not refused by authentication (want ZL_ERR_AUTH or ZL_ERR_STALE)" ;;
	esac
}
# served NODE LABEL OUTPUT STEP: STEP must have been served.
served() {
	check "$1"
	[ "$(status_of "$3" "$4")" = OK ] && return 0
	echo "$T: FAIL on node-$1: $2: $4 answered '$(status_of "$3" "$4")', want OK (output: $(tr '\n' ' ' <<<"$3"))" >&2
	BREACHES[$1]=$((${BREACHES[$1]:-0} + 1))
	BAD=1
	return 1
}
for i in 1 2 3; do ls "$CL_DIR/storage-$i/data/chunks/$VA" >"$CL_DIR/files_$i" 2>/dev/null; done
# intact NODE LABEL: A reads back as the oracle's copy, every in-sync copy is
# equal, every chunk file of A is still on every daemon.
intact() {
	local n=$1 label=$2 i
	check "$n"
	if ! "$ZL" --io-timeout 10 volume export outa "$CL_DIR/got_a" >"$CL_DIR/zl.out" 2>&1; then
		breach "$n" "$label: the operator cannot read volume A any more: $(tail -1 "$CL_DIR/zl.out")"
	elif ! cmp -s "$CL_DIR/got_a" "$CL_DIR/want_a"; then
		breach "$n" "$label: volume A's data CHANGED (first difference: $(cmp "$CL_DIR/got_a" "$CL_DIR/want_a" | head -1))"
	fi
	if ! "$ZL" --io-timeout 10 volume verify outa >"$CL_DIR/zl.out" 2>&1; then
		breach "$n" "$label: the copies of volume A differ ($(grep -v '^$' "$CL_DIR/zl.out" | head -2 | tr '\n' ' '))"
	fi
	for i in 1 2 3; do
		if ! ls "$CL_DIR/storage-$i/data/chunks/$VA" 2>/dev/null | cmp -s - "$CL_DIR/files_$i"; then
			breach "$n" "$label: chunk files of volume A were DELETED on node-$i ($(ls "$CL_DIR/storage-$i/data/chunks/$VA" 2>/dev/null | wc -l) of $(wc -l <"$CL_DIR/files_$i") left)"
			ls "$CL_DIR/storage-$i/data/chunks/$VA" >"$CL_DIR/files_$i" 2>/dev/null
		fi
	done
}
# same_read OUT FILE CHUNK: the read data equals the oracle's 4096 bytes.
same_read() {
	cmp -s "$CL_DIR/read.out" <(dd if="$1" bs=4096 skip=$(($2 * CHUNK / 4096)) count=1 status=none)
}

# --- the valid client works on every daemon (and warms the daemons' caches) --
for i in 1 2 3; do
	out=""
	for _ in $(seq 1 100); do
		out=$(outsider "$i" "${CA[@]}" --chunk "${LA[i]}" --sv "${SA_V[i]}" --off 0 --len 4096 \
			--out "$CL_DIR/read.out" hello read 2>&1)
		[ "$(status_of "$out" read)" = OK ] && break # the watch may lag: BUSY
		sleep 0.1
	done
	served "$i" "valid token of A at epoch $E2" "$out" hello &&
		served "$i" "valid token of A at epoch $E2" "$out" read &&
		{ same_read "$CL_DIR/want_a" "${LA[i]}" ||
			breach "$i" "the valid client read other bytes than volume A holds"; }
done

# --- the outsider against every daemon ---------------------------------------
for i in $NODES; do
	lead_a=(--chunk "${LA[i]}" --sv "${SA_V[i]}" --off 0 --len 4096)
	back_a=(--chunk "${BA[i]}" --sv "${SB_V[i]}" --off 0 --len 4096)
	creds=(none notoken wrong othervol old clusterbit badcluster)
	in_full "$i" || creds=(none wrong othervol old)
	for cred in "${creds[@]}"; do
		case $cred in
		none) h=(); hw=-; label="request before any HELLO" ;;
		notoken) h=(--vol "$VA" --epoch "$E2" --node k8s-worker-1 --token "" hello)
			hw=ZL_ERR_AUTH; label="no token" ;;
		wrong) h=(--vol "$VA" --epoch "$E2" --node k8s-worker-1 --token "$WRONG" hello)
			hw=ZL_ERR_AUTH; label="wrong token" ;;
		othervol) h=(--vol "$VA" --epoch "$EB" --node k8s-worker-2 --token "$TOKB" hello)
			hw=ZL_ERR_AUTH; label="token of volume B presented for A" ;;
		old) h=(--vol "$VA" --epoch "$E1" --node k8s-worker-1 --token "$OLDTOK" hello)
			hw=ZL_ERR_STALE; label="token of the old attachment (epoch $E1 < $E2)" ;;
		clusterbit) h=(--cluster "${CA[@]}" hello)
			hw=ZL_ERR_AUTH; label="A's client token with the cluster bit" ;;
		badcluster) h=(--cluster --vol 0 --epoch 0 --node "node-$i"
			--token "$(etcd_tool hmac "$BADKEY" "peer|node-$i")" hello)
			hw=ZL_ERR_AUTH; label="cluster token of a wrong key" ;;
		esac
		base=(--vol "$VA" --epoch "$E2" --fill 0xee)
		[ "$cred" = old ] && base=(--vol "$VA" --epoch "$E1" --fill 0xee)
		ops=("read:${lead_a[*]}" "read:--any ${back_a[*]}" "write:${lead_a[*]}"
			"discard:${lead_a[*]}" "write-zeroes:${lead_a[*]}" "repl-write:${back_a[*]}"
			"chunk-push:${back_a[*]}" "chunk-versions:--chunk 0 --off ${LA[i]}"
			"chunk-delete:--chunk ${LA[i]}" "chunk-delete:--chunk ${BA[i]}" "volume-delete:")
		in_full "$i" || ops=("read:${lead_a[*]}" "write:${lead_a[*]}" "repl-write:${back_a[*]}"
			"chunk-delete:--chunk ${LA[i]}" "volume-delete:")
		for op in "${ops[@]}"; do
			step=${op%%:*}
			# shellcheck disable=SC2206 # the settings are words without spaces
			args=(${op#*:})
			out=$(outsider "$i" "${h[@]}" "${base[@]}" "${args[@]}" "$step" 2>&1) ||
				fail "e2e_outsider against node-$i failed: $out"
			refused "$i" "$label" "$hw" "$out" "$step"
		done
		intact "$i" "$label"
	done
done

# --- positive and binding cases of the valid tokens --------------------------
CK=$(etcd_tool clusterkey)
for i in $FULL; do
	lead_a=(--chunk "${LA[i]}" --sv "${SA_V[i]}" --len 4096)
	# A's token writes A (on the primary; replicated to the backups).
	out=$(outsider "$i" "${CA[@]}" "${lead_a[@]}" --off 8192 --fill 0xc3 hello write read \
		--out "$CL_DIR/read.out" 2>&1) || fail "e2e_outsider against node-$i failed: $out"
	if served "$i" "valid token of A" "$out" write; then
		etcd_tool patch "$CL_DIR/want_a" $((LA[i] * CHUNK + 8192)) 4096 0xc3
	fi
	# A's own copy on a backup (ZL_WF_ANY: the read around a bad primary copy).
	out=$(outsider "$i" "${CA[@]}" --any --chunk "${BA[i]}" --sv "${SB_V[i]}" --off 0 --len 4096 \
		--out "$CL_DIR/read.out" hello read 2>&1) || fail "e2e_outsider against node-$i failed: $out"
	served "$i" "A's valid client, read --any of A's backup copy" "$out" read &&
		{ same_read "$CL_DIR/want_a" "${BA[i]}" ||
			breach "$i" "A's client read other bytes than A's backup copy holds"; }
	# Bound to A: B (also with ZL_WF_ANY) and every storage-to-storage or
	# admin opcode are refused.
	for op in "read:--vol $VB --chunk ${LB[i]} --sv ${LB_V[i]} --off 0 --len 4096" \
		"write:--vol $VB --chunk ${LB[i]} --sv ${LB_V[i]} --off 0 --len 4096" \
		"read:--vol $VB --any --chunk ${LB[i]} --sv ${LB_V[i]} --off 0 --len 4096" \
		"repl-write:--chunk ${BA[i]} --sv ${SB_V[i]} --off 0 --len 4096" \
		"chunk-push:--chunk ${BA[i]} --sv ${SB_V[i]} --off 0 --len 4096" \
		"chunk-delete:--chunk ${LA[i]}" "volume-delete:" "volume-delete:--vol $VB"; do
		step=${op%%:*}
		# shellcheck disable=SC2206
		args=(${op#*:})
		out=$(outsider "$i" "${CA[@]}" hello --fill 0xee "${args[@]}" "$step" 2>&1) ||
			fail "e2e_outsider against node-$i failed: $out"
		refused "$i" "A's valid client, $step ${args[*]:0:2}" OK "$out" "$step"
	done
	# B is attached read-only: it reads, it never writes.
	lead_b=(--chunk "${LB[i]}" --sv "${LB_V[i]}" --off 0 --len 4096)
	out=""
	for _ in $(seq 1 100); do
		out=$(outsider "$i" "${CB[@]}" "${lead_b[@]}" --out "$CL_DIR/read.out" hello read 2>&1)
		[ "$(status_of "$out" read)" = OK ] && break
		sleep 0.1
	done
	served "$i" "read-only token of B" "$out" read &&
		{ same_read "$CL_DIR/want_b" "${LB[i]}" ||
			breach "$i" "the read-only client read other bytes than volume B holds"; }
	for step in write discard write-zeroes; do
		out=$(outsider "$i" "${CB[@]}" "${lead_b[@]}" --fill 0xee hello "$step" 2>&1) ||
			fail "e2e_outsider against node-$i failed: $out"
		refused "$i" "read-only token of B" OK "$out" "$step"
	done
	check "$i"
	"$ZL" --io-timeout 10 volume export outb "$CL_DIR/got_b" >/dev/null 2>&1 && cmp -s "$CL_DIR/got_b" "$CL_DIR/want_b" ||
		breach "$i" "volume B (attached read-only) does not read back as written"
	# A cluster token of the key in etcd may read any copy.
	check "$i"
	if [ -z "$CK" ]; then
		breach "$i" "no cluster key in etcd (/zipline/keys/cluster) after the daemons and zl ran"
	else
		out=$(outsider "$i" --cluster --vol 0 --epoch 0 --node outsider-op \
			--token "$(etcd_tool hmac "$CK" "peer|outsider-op")" hello \
			--vol "$VA" --any --chunk "${BA[i]}" --sv "${SB_V[i]}" --off 0 --len 4096 read 2>&1)
		served "$i" "cluster token" "$out" hello && served "$i" "cluster token" "$out" read
	fi
done
intact 1 "valid clients' writes"

# --- a huge epoch does not fence the real client ------------------------------
MAXE=18446744073709551615
for i in $NODES; do
	lead_a=(--chunk "${LA[i]}" --sv "${SA_V[i]}" --len 4096)
	# One request per connection: the daemon closes a connection after its
	# first refused request.
	for step in write read; do
		out=$(outsider "$i" --vol "$VA" --epoch max "${lead_a[@]}" --off 0 "$step" 2>&1) ||
			fail "e2e_outsider against node-$i failed: $out"
		refused "$i" "epoch $MAXE before HELLO" - "$out" "$step"
	done
	out=$(outsider "$i" --vol "$VA" --epoch max --node k8s-worker-1 --token "$WRONG" hello \
		"${lead_a[@]}" --off 0 write 2>&1) || fail "e2e_outsider against node-$i failed: $out"
	case "$(status_of "$out" hello)" in
	ZL_ERR_AUTH | ZL_ERR_STALE | ZL_ERR_BUSY) refused "$i" "HELLO at epoch $MAXE" "$(status_of "$out" hello)" "$out" write ;;
	*) refused "$i" "HELLO at epoch $MAXE" ZL_ERR_AUTH "$out" write ;;
	esac
	# The valid client's own request with epoch 2^64-1 in its header (the
	# contract: header epochs are ignored) may be served or refused ...
	out=$(outsider "$i" "${CA[@]}" hello --epoch max "${lead_a[@]}" --off 12288 --fill 0x71 write 2>&1)
	[ "$(status_of "$out" write)" = OK ] &&
		etcd_tool patch "$CL_DIR/want_a" $((LA[i] * CHUNK + 12288)) 4096 0x71
done
# ... and the real client at its epoch still writes, also after a restart.
fenced() {
	local i=$1 label=$2 out="" chunk=${LA[i]} sv=${SA_V[i]} to=$1 end=$((SECONDS + 60)) c v p
	while :; do # 60 s: a restarted daemon peers first
		out=$(outsider "$to" "${CA[@]}" --chunk "$chunk" --sv "$sv" --len 4096 \
			--off 16384 --fill $((0x40 + i)) hello write 2>&1)
		[ "$(status_of "$out" write)" = OK ] && break # a restart: not up yet, BUSY
		[ $SECONDS -lt $end ] || break
		# A slow restart (the VM) moves A's rows on: new slice versions, and
		# node-I may lead none of them any more. Follow the current rows like
		# a real client: a row node-I leads, else one it backs (the write
		# goes through that row's primary and is forwarded, with the
		# client's epoch, to node-I). An epoch fence on node-I refuses both.
		read -r c v <<<"$(lead <(cl_rows "$VA" 2>/dev/null) "$i")"
		p=$i
		if [ -z "$c" ]; then
			read -r c v p <<<"$(cl_rows "$VA" 2>/dev/null | awk -v n="node-$i" '{ p = "";
				for (k = 4; k <= NF; k++) if ($k ~ /:in_sync$/) { split($k, a, ":");
					if (p == "") p = a[1]; else if (a[1] == n) { sub("node-", "", p);
						print $1, $2, p; exit } } }')"
		fi
		[ -n "$c" ] && [ -n "$p" ] && chunk=$c sv=$v to=$p
		sleep 0.2
	done
	check "$i"
	if [ "$(status_of "$out" write)" = OK ]; then
		etcd_tool patch "$CL_DIR/want_a" $((chunk * CHUNK + 16384)) 4096 $((0x40 + i))
		[ "$to" = "$i" ] || echo "$T: $label: node-$i backs chunk $chunk now; written through node-$to"
	else
		breach "$i" "$label: the real client (epoch $E2) is FENCED: $(tr '\n' ' ' <<<"$out") (through node-$to, chunk $chunk, slice version $sv; rows: $(cl_rows "$VA" 2>&1 | tr '\n' ';'))"
	fi
}
for i in $NODES; do fenced "$i" "after epoch $MAXE"; done
cl_stop storage-1
cl_start_storage 1
cl_wait_nodes 3 || fail "node-1 did not come back"
fenced 1 "after epoch $MAXE and a restart of node-1"
intact 1 "after the huge epochs"

if [ "$XPORT" = rdma ]; then
	# The attacks really went over RDMA: every daemon accepted one RDMA
	# connection per e2e_outsider run against it (and zl's).
	for i in $NODES; do
		# The accept line is rate-limited: each one counts the ones it stood for.
		n=$(awk '/connection accepted: .*transport=rdma/ {
			n++; if (match($0, /\(([0-9]+) more accepted/)) n += substr($0, RSTART + 1, RLENGTH - 15) + 0
		} END { print n + 0 }' "$CL_DIR/storage-$i/log")
		check "$i"
		want=50
		in_full "$i" || want=24
		[ "$n" -gt "$want" ] || breach "$i" "only $n RDMA connections accepted: the scenario did not run over RDMA"
		echo "$T: node-$i accepted $n RDMA connections"
	done
fi
for i in 1 2 3; do
	echo "$T: node-$i: ${CHECKS[$i]:-0} checks, ${BREACHES[$i]:-0} breaches"
done
[ "$BAD" = 0 ] || fail "the outsider got through (BREACH lines above)"
echo "$T: PASS"
