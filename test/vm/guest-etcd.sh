# Sourced by the guest scripts (powercut-guest.sh, ublk-guest.sh,
# nbd-guest.sh): one etcd member on 127.0.0.1, the wait for a storage
# daemon's registration, and a thread dump of a daemon that hangs.
#
# vm_guest_etcd_start DATA_DIR LOG URL: starts etcd with its data in
# DATA_DIR, its log appended to LOG, clients on URL (http://127.0.0.1:2379);
# sets etcd_pid; returns once etcd answers, or calls the caller's `fail`
# (etcd exited, or no answer in 60 s).
vm_guest_etcd_start() {
	local data=$1 log=$2 url=$3 i
	etcd --name zl-etcd --data-dir "$data" \
		--listen-client-urls "$url" --advertise-client-urls "$url" \
		--listen-peer-urls http://127.0.0.1:2380 \
		--initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster zl-etcd=http://127.0.0.1:2380 \
		--logger zap --log-level warn >>"$log" 2>&1 &
	etcd_pid=$!
	for ((i = 0; i < 600; i++)); do
		curl -s -m 1 -X POST -d '{}' "$url/v3/maintenance/status" >/dev/null 2>&1 && return 0
		kill -0 "$etcd_pid" 2>/dev/null || fail "etcd exited: $(tail -5 "$log")"
		sleep 0.1
	done
	fail "etcd did not answer on $url in 60 s"
}

# vm_guest_threads PID: where each thread of PID waits: its state, wait
# channel and kernel stack, and its user stack where gdb is installed.
vm_guest_threads() {
	local t
	for t in /proc/"$1"/task/*; do
		echo "-- tid ${t##*/} $(cut -d' ' -f2,3 "$t/stat" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
		sed 's/^/     /' "$t/stack" 2>/dev/null
	done
	command -v gdb >/dev/null &&
		timeout 120 gdb -p "$1" -batch -nx -ex 'thread apply all bt' 2>&1 | grep -v '^\[New LWP'
}

# vm_guest_wait_node URL NODE PID SINCE SECS LOG: returns once NODE's record
# in etcd (URL) says its daemon started at SINCE (unix seconds) or later:
# this start of the daemon registered. etcd is the oracle, not the daemon's
# log: a log on a 9p share may reach a reader late. Calls the caller's
# `fail` when PID exits, or after SECS with PID's threads, the log's tail
# and the kernel's last lines.
vm_guest_wait_node() {
	local url=$1 node=$2 pid=$3 since=$4 end=$((SECONDS + $5)) log=$6 v t
	while ((SECONDS < end)); do
		v=$(etcdctl --endpoints "$url" --command-timeout=5s get --print-value-only \
			"/zipline/nodes/$node" 2>/dev/null)
		t=$(grep -o '"start_time":[0-9]*' <<<"$v" | cut -d: -f2)
		[[ -n $t ]] && ((t >= since)) && return 0
		kill -0 "$pid" 2>/dev/null || fail "zipline-storage $node exited: $(tail -5 "$log")"
		sleep 0.1
	done
	vm_guest_threads "$pid" 2>&1 | head -150 | sed 's/^/    /' >&2
	echo "    now: $(date -u +%FT%TZ); record: ${v:-none}" >&2
	tail -8 "$log" | sed 's/^/    log: /' >&2
	dmesg | tail -12 | sed 's/^/    kernel: /' >&2
	fail "zipline-storage $node did not register in $5 s (its threads above)"
}
