#!/usr/bin/env bash
# Builds the image from the unmodified Dockerfile with podman, offline from
# local Debian base images (scripts/build-image.sh), then runs the binaries
# in it.
#   usage: image_test.sh [TAG]         (default localhost/zipline:test)
# Needs root (rootful podman) and the Debian apt mirror the host uses. Takes
# minutes cold (debootstrap of the base images, then the image build).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
tag="${1:-localhost/zipline:test}"

fail=0
check() { # check NAME COMMAND...: run, report, remember failures
	local name="$1"; shift
	if "$@"; then echo "ok: $name"; else echo "FAIL: $name" >&2; fail=1; fi
}

t0=$(date +%s)
if ! bash "$src/scripts/build-image.sh" "$tag"; then
	echo "image_test: FAILED: scripts/build-image.sh could not build $tag (its last lines say why)" >&2
	exit 1
fi
t1=$(date +%s)
echo "image_test: image $tag built in $((t1 - t0)) s"

run() { podman run --rm --network none --no-healthcheck "$tag" "$@"; }

out=$(run zipline-storage --version)
echo "$out"
check "zipline-storage --version prints its version" grep -Eq '^zipline-storage [0-9]+\.[0-9]+' <<<"$out"
check "zl --help works" run zl --help
check "image runs as the unprivileged user by default" test "$(run id -u)" = 10001

for b in zipline-node zipline-controller; do
	check "$b --help" run "$b" --help
	check "$b --version" run "$b" --version
done

# What the node plugin and the storage daemon call at run time.
for tool in mkfs.ext4 mkfs.xfs resize2fs xfs_growfs blkid losetup mount umount \
	    fusermount3 modprobe ip; do
	check "runtime tool $tool" run sh -c "command -v $tool >/dev/null"
done
check "verbs providers installed" run sh -c 'ls /usr/lib/*/libibverbs/ | grep -q mlx5'
check "no compiler in the runtime image" run sh -c '! command -v cc && ! command -v cmake'
# Every binary's shared libraries resolve.
check "all shared libraries resolve" run sh -c \
	'for b in /usr/local/bin/*; do ldd "$b" | grep "not found" && exit 1; done; exit 0'

size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "image_test: image size $((size / 1024 / 1024)) MiB"
if [ "$fail" -ne 0 ]; then
	echo "image_test: FAILED" >&2
	exit 1
fi
echo "image_test: all checks passed"
