#!/usr/bin/env bash
# vm_selftest: proves the test VM harness (test/vm/vm.sh) on this machine.
#
#   0. the harness refuses bad input with exit 125 before booting, and a
#      guest over its time limit ends with exit 124 and the banner; a kernel
#      crash while booting (ZL_VM_FAKE_BOOT_CRASH) is booted again, and with
#      no retry left (ZL_VM_BOOT_RETRIES=0) ends with 125 and its banner;
#   1. one guest with -M nbd,ublk_drv and two --ip addresses: the modules
#      are loaded, rxe0 carries both addresses, ibv_rc_pingpong and rping
#      work between them (test/vm/selftest-guest.sh), stdout and stderr
#      reach the host apart, the exit status (23) comes back, the shared
#      build tree is written through, the host's /etc is not;
#   2. power cut: a guest writes 4 KiB blocks with O_DIRECT|O_DSYNC to a
#      virtio disk (cache=none) and logs every acknowledged write in the
#      shared tree (vm_blkio write); once it is writing, the host SIGKILLs
#      qemu (vm.sh kill) at a random moment; a second guest on the same
#      image checks that every acknowledged write reads back (vm_blkio
#      verify), and the same check on a damaged copy on the host fails.
#
# Usage: test/vm/selftest.sh BUILD_DIR   (BUILD_DIR/bin/vm_blkio must exist)
# A harness that cannot boot fails this test (never a skip).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
build=$(cd "${1:?usage: selftest.sh BUILD_DIR}" && pwd -P)
vm=$here/vm.sh
blkio=$build/bin/vm_blkio
[[ -x $blkio ]] || { echo "vm_selftest: FAIL: $blkio not built" >&2; exit 1; }

work=$(mktemp -d "$build/vm-selftest.XXXXXX")
name=selftest-$$
t_start=$SECONDS
cleanup() {
	bash "$vm" kill "$name" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "vm_selftest: FAIL: $*" >&2
	exit 1
}
step() { echo "vm_selftest: [$((SECONDS - t_start)) s] $*"; }
# boot TAG CMD...: runs CMD (a vm.sh run) with its stdout and stderr in
# $work/TAG.out and $work/TAG.err, shows both; sets rc and secs.
boot() {
	local tag=$1 t0=$SECONDS
	shift
	"$@" >"$work/$tag.out" 2>"$work/$tag.err"
	rc=$?
	secs=$((SECONDS - t0))
	sed 's/^/    | /' "$work/$tag.out"
	sed 's/^/    |2 /' "$work/$tag.err"
}

# ---- 0. loud failures
step "0. bad input and the guest time limit"
bash "$vm" run --disk "$work/no-such-image" -- true >"$work/o" 2>"$work/e"
rc=$?
((rc == 125)) || fail "vm.sh run --disk MISSING exited $rc, want 125"
grep -q "did NOT run" "$work/e" || fail "no 'did NOT run' banner for a harness failure: $(cat "$work/e")"
t0=$SECONDS
bash "$vm" run -t 4 -- sleep 600 >"$work/o" 2>"$work/e"
rc=$?
((rc == 124)) || { cat "$work/e" >&2; fail "a guest over its 4 s limit exited $rc, want 124"; }
grep -q "GUEST TIMED OUT" "$work/e" || fail "no timeout banner: $(cat "$work/e")"
step "   ok: 125 + banner on bad input, 124 + banner after the limit ($((SECONDS - t0)) s)"
# A kernel crash while booting (before the command starts) is booted again
# and said on stderr; with no retry left it is a loud 125, never a result.
t0=$SECONDS
ZL_VM_FAKE_BOOT_CRASH=1 bash "$vm" run -- bash -c 'echo "ran after a retry"' >"$work/o" 2>"$work/e"
rc=$?
((rc == 0)) || { cat "$work/e" >&2; fail "a guest whose first boot crashed exited $rc, want 0 (booted again)"; }
grep -qx "ran after a retry" "$work/o" || fail "the command did not run after the boot crash: $(cat "$work/o")"
grep -q "crashed while booting.*booting again (boot 2 of at most 3)" "$work/e" ||
	fail "vm.sh did not say that it booted again: $(grep zl-vm "$work/e")"
ZL_VM_FAKE_BOOT_CRASH=1 ZL_VM_BOOT_RETRIES=0 bash "$vm" run -- true >"$work/o" 2>"$work/e"
rc=$?
((rc == 125)) || fail "a boot crash with no retry left exited $rc, want 125"
grep -q "EMULATOR CRASH WHILE BOOTING" "$work/e" || fail "no boot-crash banner: $(grep zl-vm "$work/e")"
step "   ok: a boot crash is booted again (0), with no retry left it is 125 + banner ($((SECONDS - t0)) s)"

# ---- 1. modules, Soft-RoCE between two addresses, I/O, status
step "1. modules + rxe0 with two addresses"
rm -f /etc/zl-vm-overlay-probe
cd "$build" || fail "cannot enter $build"
boot r1 bash "$vm" run -M nbd,ublk_drv --ip 10.77.9.1/24 --ip 10.77.9.2/24 \
	-- bash "$here/selftest-guest.sh" "$work"
((rc == 23)) || fail "round 1 exited $rc, want 23 (the guest script's success status)"
grep -qx "guest stdout line" "$work/r1.out" || fail "the guest's stdout did not reach the host's stdout"
grep -qx "guest stderr line" "$work/r1.err" || fail "the guest's stderr did not reach the host's stderr"
if grep -q "guest stderr line" "$work/r1.out" || grep -q "guest stdout line" "$work/r1.err"; then
	fail "the guest's stdout and stderr were mixed"
fi
[[ $(cat "$work/from-guest" 2>/dev/null) == "written in the guest" ]] ||
	fail "the file the guest wrote in the shared build tree is not on the host"
[[ ! -e /etc/zl-vm-overlay-probe ]] || fail "the guest wrote through to the host's /etc"
step "   ok: round 1 in $secs s"

# ---- 2. power cut on a virtio disk
step "2. power cut during O_DIRECT|O_DSYNC writes"
nblocks=256        # 1 MiB region: overwritten pass after pass
ready_after=320    # more than one pass acknowledged before the cut may come
max_writes=2000000 # bound; the cut must come long before
seed=$(((RANDOM << 16) | RANDOM))
img=$work/disk.img
truncate -s 16M "$img" || fail "cannot create $img"
log=$work/acked.log
ready=$work/writing
# shellcheck disable=SC2016 # $ZL_VM_DISKS is expanded in the guest
bash "$vm" start --name "$name" --share "$build" --disk "$img" -- \
	bash -c 'exec "$0" write "${ZL_VM_DISKS%% *}" "$@"' "$blkio" "$log" "$seed" "$nblocks" \
	"$ready" "$ready_after" "$max_writes" || fail "vm.sh start exited $?"
bash "$vm" wait "$name" --file "$ready" --timeout 300
rc=$?
((rc == 0)) || fail "the writer did not signal readiness (vm.sh wait exited $rc)"
# A random moment 0.2..2.2 s into the writing.
sleep "$((RANDOM % 3)).$((RANDOM % 10))"
n_before=$(wc -l <"$log")
bash "$vm" kill "$name" || fail "vm.sh kill exited $? (the writer had stopped: no cut mid-write)"
n_after=$(wc -l <"$log")
step "   power cut after $n_after acknowledged writes ($n_before when the kill was sent)"
((n_after > ready_after)) || fail "only $n_after writes logged, want more than $ready_after"

# shellcheck disable=SC2016 # $ZL_VM_DISKS is expanded in the guest
boot r2 bash "$vm" run --share "$build" --disk "$img" -- \
	bash -c 'exec "$0" verify "${ZL_VM_DISKS%% *}" "$@"' "$blkio" "$log" "$seed" "$nblocks"
((rc == 0)) || fail "after the power cut, acknowledged writes did not read back (verify exited $rc)"
grep -q " 0 wrong" "$work/r2.out" || fail "verify printed no result line"
step "   ok: every acknowledged write survived (check boot $secs s)"
# The check itself can fail: on the host, a copy of the image with one
# acknowledged block rolled back to zeros must be caught (not the block of
# the unacknowledged write in flight, which verify skips).
victim=$((($(wc -l <"$log") + 100) % nblocks))
if ! cp "$img" "$work/bad.img" ||
	! dd if=/dev/zero of="$work/bad.img" bs=4096 seek="$victim" count=1 conv=notrunc status=none; then
	fail "cannot make the damaged copy"
fi
"$blkio" verify "$work/bad.img" "$log" "$seed" "$nblocks" >"$work/bad.out" 2>&1
rc=$?
((rc == 1)) && grep -q " 1 wrong" "$work/bad.out" ||
	fail "vm_blkio verify missed a lost block (exit $rc): $(cat "$work/bad.out")"
step "   ok: the check catches a lost acknowledged block"
step "PASS in $((SECONDS - t_start)) s"
