#!/usr/bin/env bash
# Checks the project the way a new user meets it: a fresh Debian bookworm
# container holding only gcc, g++, make, cmake, git and ca-certificates,
# a `git clone` of this tree's committed HEAD into an empty directory in it,
# then `make test` there as root. Prints the time of every stage.
#
#   usage: test/clean-machine.sh            (or: make test-clean)
#
# The container is privileged (loop devices, FUSE, mounts, qemu for the VM
# tests, podman inside it for the image test) and uses the host's network
# for the Debian mirror and the npm registry. From the host it gets only the
# kernel and the machine's TLS trust setup (local CA certificates in
# /usr/local/share/ca-certificates, /etc/npmrc and the *_CA_* / SSL_CERT_*
# variables), which a TLS-intercepting proxy on the way to the registries
# needs; packages, base images, tool caches and the build all start empty,
# so the times are cold times.
#
# Environment:
#   TEST_STAGES         stages of `make test` to run (default: all of them,
#                       see the Makefile); e.g. TEST_STAGES=unit stops after
#                       the build and the unit tests
#   ZL_CLEAN_KEEP=1     keep the container (and print its name) afterwards
#
# Uncommitted changes are not tested (a warning says so). Needs root.
# Exit status: that of `make test` in the container; 1 when the container
# could not be made.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
stages=${TEST_STAGES:-}
keep=${ZL_CLEAN_KEEP:-0}
image=localhost/zipline-clean:bookworm
name=zipline-clean-$$
t_all=$(date +%s)

say() { echo "clean-machine: $*" >&2; }
[ "$(id -u)" -eq 0 ] || { say "must run as root (rootful podman, privileged container)"; exit 1; }
command -v git >/dev/null || { say "git is missing (apt-get install git)"; exit 1; }

if [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
	say "WARNING: uncommitted changes in $src are not tested (only HEAD is cloned)"
fi
head=$(git -C "$src" rev-parse --short HEAD)

work=$(mktemp -d /tmp/zipline-clean.XXXXXX)
cleanup() {
	if [ "$keep" = 1 ]; then
		say "kept container $name (podman rm -f $name when done)"
	else
		podman rm -f -v "$name" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

summary=()
# timed NAME COMMAND...: run, print and remember "stage NAME: N s".
timed() {
	local n=$1 t rc=0
	shift
	t=$(date +%s)
	"$@" || rc=$?
	summary+=("stage $n: $(($(date +%s) - t)) s$([ $rc -eq 0 ] || echo " (FAILED, exit $rc)")")
	echo "${summary[-1]}"
	return $rc
}

# 1. The host's podman and the debootstrap base images (cached on the host).
timed base-images "$src/scripts/build-image.sh" --base-only

# 2. A fresh bookworm image with the five tools a new user starts from.
mkdir -p "$work/ctx"
cat >"$work/ctx/Containerfile" <<'EOF'
FROM debian:bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc g++ make cmake git ca-certificates \
 && rm -rf /var/lib/apt/lists/*
EOF
timed fresh-image podman build -q --pull=never --network host -t "$image" "$work/ctx"

# 3. The committed HEAD as a bundle: `git clone` runs inside the container.
git -C "$src" bundle create -q "$work/zipline.bundle" HEAD
say "testing commit $head (TEST_STAGES=${stages:-all})"

# The machine's TLS trust setup (see the top of this file).
trust=()
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
	trust+=(-v /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro)
fi
if [ -f /etc/npmrc ]; then trust+=(-v /etc/npmrc:/etc/npmrc:ro); fi
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE; do
	if [ -n "${!v:-}" ]; then trust+=(-e "$v=${!v}"); fi
done

# What runs in the container. The elapsed time since t0 on the host (one
# clock) measures the container start.
cat >"$work/inside.sh" <<'EOF'
set -euo pipefail
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
	update-ca-certificates >/dev/null
fi
echo "stage container-start: $(($(date +%s) - T0)) s"
rm -rf /root/zipline
git -c advice.detachedHead=false clone -q /in/zipline.bundle /root/zipline
cd /root/zipline
if [ -n "$TEST_STAGES" ]; then
	exec make test TEST_STAGES="$TEST_STAGES"
fi
exec make test
EOF

# /dev from the host: loop and nbd device nodes made after the start appear.
# /var/lib/containers is a fresh volume (podman's overlay cannot stack on the
# container's own overlay root; on the volume it can).
rc=0
podman run --name "$name" --privileged --network host --hostname zipline-clean \
	-v /dev:/dev -v /var/lib/containers \
	"${trust[@]}" -v "$work:/in:ro" -e T0="$(date +%s)" -e TEST_STAGES="$stages" \
	"$image" bash /in/inside.sh 2>&1 | tee "$work/log" || rc=$?
if [ "$keep" = 1 ]; then cp "$work/log" "/tmp/$name.log"; say "log: /tmp/$name.log"; fi

echo "================ clean-machine summary (commit $head) ================"
printf '%s\n' "${summary[@]}"
grep -E '^stage [a-z0-9-]+: [0-9]+ s' "$work/log" || true
echo "total: $(($(date +%s) - t_all)) s"
if [ "$rc" -ne 0 ]; then
	say "FAILED: make test in the fresh container exited $rc (log above)"
	exit "$rc"
fi
say "make test passed in a fresh bookworm container"
