#!/usr/bin/env bash
# Usage: with-etcd.sh CMD [ARGS...]
# Starts a private etcd on free loopback ports in a temporary directory,
# exports ZL_TEST_ETCD=http://127.0.0.1:PORT, runs CMD, then stops etcd
# (by its PID) and removes the directory. Exit status is CMD's.
set -u
dir=$(mktemp -d /tmp/zl-etcd.XXXXXX)
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
cport=$(free_port); pport=$(free_port)
etcd --name zl-test --data-dir "$dir/data" \
  --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
  --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "zl-test=http://127.0.0.1:$pport" \
  --logger zap --log-level error >"$dir/etcd.log" 2>&1 &
epid=$!
cleanup() { kill "$epid" 2>/dev/null; wait "$epid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
ok=0
for _ in $(seq 1 100); do
  if curl -s -m 1 -X POST -d '{}' "http://127.0.0.1:$cport/v3/maintenance/status" >/dev/null 2>&1; then ok=1; break; fi
  kill -0 "$epid" 2>/dev/null || break
  sleep 0.1
done
if [ "$ok" != 1 ]; then
  echo "with-etcd: etcd did not start; its log:" >&2; cat "$dir/etcd.log" >&2; exit 1
fi
export ZL_TEST_ETCD="http://127.0.0.1:$cport"
export ZL_TEST_ETCD_PID="$epid"
"$@"
