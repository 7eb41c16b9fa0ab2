# shellcheck shell=bash
# Shell functions shared by the bench/ scripts (source it; bash).

# bench_cpu_ticks PID...: utime + stime of the processes, in clock ticks
# (getconf CLK_TCK per second), from /proc/PID/stat.
bench_cpu_ticks() {
	local t=0 p f
	for p in "$@"; do
		read -r -a f <"/proc/$p/stat"
		# Fields 14 and 15 (1-based), past the "(comm)" field (no spaces in ours).
		t=$((t + f[13] + f[14]))
	done
	echo "$t"
}

# bench_io_writes PID...: "SYSCW WRITE_BYTES" summed over the processes, from
# /proc/PID/io (syscw: write-family system calls; write_bytes: bytes the
# processes sent to the block layer, O_DIRECT and io_uring writes included).
bench_io_writes() {
	local c=0 b=0 p k v
	for p in "$@"; do
		while read -r k v; do
			case $k in
			syscw:) c=$((c + v)) ;;
			write_bytes:) b=$((b + v)) ;;
			esac
		done <"/proc/$p/io"
	done
	echo "$c $b"
}

# bench_zl_bench_cpu ZL ARGS...: runs `ZL ARGS...` (zl bench --json); prints
# its JSON and, on the last line, its user+system CPU seconds (rusage).
bench_zl_bench_cpu() {
	/usr/bin/python3 - "$@" <<'PY'
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if r.returncode:
    sys.stderr.write(r.stderr)
    sys.exit("zl bench failed with exit %d" % r.returncode)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.stdout.strip())
print("%.4f" % (u.ru_utime + u.ru_stime))
PY
}
