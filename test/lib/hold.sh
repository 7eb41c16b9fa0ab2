# Sourced by e2e tests (after cluster.sh) that put test/lib/etcd_hold_proxy.py
# between a process and etcd: watches (or, with "all", every answer) held
# while the test says so. Each proxy lives in $CL_DIR/serve-proxy-NAME
# (pid, log, the hold file), which cl_stop_all stops. The caller defines
# `fail`.

# hold_proxy_start NAME [all]: starts proxy NAME in front of $CL_ETCD; its
# port on stdout once it listens.
hold_proxy_start() {
	local d="$CL_DIR/serve-proxy-$1" pp
	mkdir -p "$d"
	pp=$(cl_free_port)
	/usr/bin/python3 "$SRC/test/lib/etcd_hold_proxy.py" "$pp" "${CL_ETCD##*:}" "$d/hold" ${2:-} \
		>"$d/log" 2>&1 &
	echo $! >"$d/pid"
	for _ in $(seq 1 50); do grep -q listening "$d/log" && break; sleep 0.1; done
	grep -q listening "$d/log" || fail "hold proxy $1 did not start: $(cat "$d/log")"
	echo "$pp"
}

# hold_on NAME: proxy NAME holds from now on (its watch streams; every
# answer with "all").
hold_on() { touch "$CL_DIR/serve-proxy-$1/hold"; }

# hold_watches NAME: hold_on NAME, then waits until every watch stream open
# through it says it holds (within 5 s; it says so within 20 ms).
hold_watches() {
	local pl="$CL_DIR/serve-proxy-$1/log" n_open=0 n_hold=0
	hold_on "$1"
	for _ in $(seq 1 100); do
		n_open=$(($(grep -c 'watch stream opened' "$pl" || true) - $(grep -c 'watch stream closed' "$pl" || true)))
		n_hold=$(grep -c 'watch stream holding' "$pl" || true)
		[ "$n_open" -gt 0 ] && [ "$n_hold" -ge "$n_open" ] && return 0
		sleep 0.05
	done
	fail "proxy $1 does not hold its $n_open watch streams: $(cat "$pl")"
}

# hold_release NAME: proxy NAME passes everything on again.
hold_release() { rm -f "$CL_DIR/serve-proxy-$1/hold"; }

# hold_cut NAME: proxy NAME cuts every watch stream open through it (what
# they held is dropped, their connections closed: a partition), and goes on
# cutting new ones until hold_uncut NAME; returns once no stream it let open
# is left (within 5 s).
hold_cut() {
	local pl="$CL_DIR/serve-proxy-$1/log" n_open=0
	touch "$CL_DIR/serve-proxy-$1/hold.cut"
	for _ in $(seq 1 100); do
		n_open=$(($(grep -c 'watch stream opened' "$pl" || true) - $(grep -c 'watch stream closed' "$pl" || true)))
		[ "$n_open" -le 0 ] && return 0
		sleep 0.05
	done
	fail "proxy $1 still has $n_open watch streams open after the cut: $(cat "$pl")"
}
hold_uncut() { rm -f "$CL_DIR/serve-proxy-$1/hold.cut"; }

# hold_storage N: storage daemons node-1..N, node-I reaching etcd through
# hold proxy I (its watches held on hold_watches I); returns once all are
# registered.
hold_storage() {
	local i pp
	for i in $(seq 1 "$1"); do
		pp=$(hold_proxy_start "$i")
		cl_start_storage "$i" "" --etcd "http://127.0.0.1:$pp"
	done
	cl_wait_nodes "$1" || fail "storage nodes did not register"
}
