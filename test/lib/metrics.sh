# Sourced first by the e2e tests that scrape daemons' /metrics
# (metrics_e2e.sh, fair_e2e.sh, fullfs_e2e.sh):
#   source "$SRC/test/lib/metrics.sh" NAME
# sources cluster.sh and heal.sh, names the test (hl_test NAME: fail,
# check_fail, hl_end), sets MT (test/lib/metrics_tool.py, which parses with
# prometheus_client's text parser, an oracle independent of the daemons'
# code) and stops the test at once when python3-prometheus-client is
# missing, saying how to install it. Needs SRC (the source tree).
# mt_sum NAME [LABEL=VALUE...] -- URL...: the sum over the URLs of the
# samples NAME with those labels; fails the test when a scrape fails.

# shellcheck source=cluster.sh
source "$SRC/test/lib/cluster.sh"
# shellcheck source=heal.sh
source "$SRC/test/lib/heal.sh"
hl_test "$1"
MT="$SRC/test/lib/metrics_tool.py"
/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || {
	echo "$1: FAIL: python3-prometheus-client is missing for /usr/bin/python3 (scripts/install-deps.sh installs it)" >&2
	exit 1
}

mt_sum() { /usr/bin/python3 "$MT" sum "$@" || fail "scraping failed: metrics_tool.py sum $*"; }
