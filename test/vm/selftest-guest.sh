#!/bin/bash
# The guest half of round 1 of test/vm/selftest.sh (runs inside the VM):
# the requested modules are loaded, rxe0 carries both --ip addresses, and
# RDMA works between them (ibv_rc_pingpong over verbs, rping over rdma_cm).
# Usage (in the guest): selftest-guest.sh SHARED_WORK_DIR
# Exit status: 23 when every check passed (the host checks that exactly
# this status comes back), 1 otherwise.
set -u
work=${1:?usage: selftest-guest.sh WORK_DIR}
fails=0
ok() { echo "guest: ok: $*"; }
bad() {
	echo "guest: FAIL: $*" >&2
	fails=$((fails + 1))
}

[[ ${ZL_VM:-} == 1 ]] || bad "ZL_VM is not 1 (not run by test/vm/vm.sh?)"
for m in rdma_rxe ib_uverbs rdma_ucm nbd ublk_drv; do
	if [[ -d /sys/module/$m ]]; then ok "module $m loaded"; else bad "module $m not loaded"; fi
done
[[ -b /dev/nbd0 ]] && ok "/dev/nbd0 exists" || bad "/dev/nbd0 missing"
[[ -c /dev/ublk-control ]] && ok "/dev/ublk-control exists" || bad "/dev/ublk-control missing"

read -r -a ips <<<"${RXE_IPS:-}"
read -r -a gids <<<"${RXE_GID_INDEXES:-}"
if [[ ${#ips[@]} -ne 2 || ${#gids[@]} -ne 2 ]]; then
	bad "want 2 rxe0 addresses, got RXE_IPS='${RXE_IPS:-}' RXE_GID_INDEXES='${RXE_GID_INDEXES:-}'"
	exit 1
fi
[[ $RXE_IP == "${ips[0]}" && $RXE_GID_INDEX == "${gids[0]}" ]] ||
	bad "RXE_IP/RXE_GID_INDEX ($RXE_IP/$RXE_GID_INDEX) are not the first of RXE_IPS/RXE_GID_INDEXES"
if ibv_devinfo -d "$RXE_DEV" | grep -q PORT_ACTIVE; then ok "$RXE_DEV port active"; else bad "$RXE_DEV port not active"; fi

# pair NAME SERVER... -- CLIENT...: server in the background, the client
# retried while the server starts (a process start costs up to ~1 s here).
pair() {
	local name=$1 srv=() spid try rc=1
	shift
	while [[ $1 != -- ]]; do
		srv+=("$1")
		shift
	done
	shift
	"${srv[@]}" >"/tmp/$name.srv" 2>&1 &
	spid=$!
	for ((try = 0; try < 40; try++)); do
		if "$@" >"/tmp/$name.cli" 2>&1; then
			rc=0
			break
		fi
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.5
	done
	if ((rc == 0)); then
		wait "$spid" || rc=1
	else
		kill "$spid" 2>/dev/null
		wait "$spid" 2>/dev/null
	fi
	if ((rc)); then
		bad "$name"
		sed 's/^/    server: /' "/tmp/$name.srv" >&2
		sed 's/^/    client: /' "/tmp/$name.cli" >&2
		return 1
	fi
	ok "$name"
}

# Verbs RC between the two addresses: server on GID ${gids[0]}, client on ${gids[1]}.
if pair "ibv_rc_pingpong ${ips[1]} -> ${ips[0]}" \
	ibv_rc_pingpong -d "$RXE_DEV" -g "${gids[0]}" -n 100 -- \
	ibv_rc_pingpong -d "$RXE_DEV" -g "${gids[1]}" -n 100 "${ips[0]}"; then
	f="/tmp/ibv_rc_pingpong ${ips[1]} -> ${ips[0]}.cli"
	grep -q "local address:.*GID ::ffff:${ips[1]}" "$f" && grep -q "remote address:.*GID ::ffff:${ips[0]}" "$f" ||
		bad "ibv_rc_pingpong did not use GIDs ${ips[1]} -> ${ips[0]}: $(grep address "$f")"
	grep -h 'iters in' "$f"
fi
# rdma_cm connection + RDMA READ/WRITE between the two addresses.
pair "rping ${ips[1]} -> ${ips[0]}" \
	rping -s -a "${ips[0]}" -C 5 -- \
	rping -c -a "${ips[0]}" -I "${ips[1]}" -C 5 -v

# The shared directory is read-write at the same path; the rest of the host
# root is behind a throw-away overlay.
echo "written in the guest" >"$work/from-guest" && ok "wrote $work/from-guest" || bad "cannot write $work/from-guest"
touch /etc/zl-vm-overlay-probe && ok "wrote /etc (overlay)" || bad "cannot write /etc in the overlay"
# The checkout this script lives in is shared read-only at its own path
# (wherever it is, /tmp too, which is fresh in the guest).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
if touch "$here/.zl-vm-ro-probe" 2>/dev/null; then
	rm -f "$here/.zl-vm-ro-probe"
	bad "the checkout $here is writable in the guest (want the read-only share)"
else
	ok "the checkout $here is read-only"
fi
echo "guest stdout line"
echo "guest stderr line" >&2

((fails == 0)) || exit 1
exit 23
