#!/usr/bin/env bash
# shellcheck disable=SC2054 # commas inside qemu option values are meant
# test/vm/vm.sh - Zipline's test VM: runs a command inside a throw-away
# qemu guest that boots Debian's own kernel (software emulation, TCG), so
# tests can use kernel parts the host kernel lacks: Soft-RoCE (rdma_rxe,
# ib_uverbs, rdma_ucm), nbd, ublk_drv, and a virtio disk that can lose power.
#
#   vm.sh run   [options] [--] CMD [ARG...]   boot, run CMD, exit with its status
#   vm.sh start --name N [options] [--] CMD   boot in the background
#   vm.sh wait  N [--file PATH] [--timeout S] wait for PATH, or for the end of N
#   vm.sh kill  N                             power cut: SIGKILL N's qemu
#   vm.sh shell [options]                     interactive bash in a guest
#   vm.sh prepare                             only install packages, fill the cache
#   vm.sh clean                               remove the cache
#
# See test/vm/README.md and `vm.sh help`. Exit status: the command's; 124 if
# the guest hit its time limit; 125 if the harness failed (the command did
# not run). Needs root (apt-get, and qemu serves the whole host root).
set -uo pipefail

VM_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
VM_EXIT_TIMEOUT=124
VM_EXIT_HARNESS=125

vm_cache=${ZL_VM_CACHE:-/var/cache/zipline-vm}
vm_state_root=${ZL_VM_STATE:-/tmp/zipline-vm}
vm_kernel_pkg=${ZL_VM_KERNEL_PKG:-linux-image-amd64}
# The suite the kernel comes from, read through a private apt source list
# in the cache (the host's sources stay as they are); empty: the host's.
# trixie-backports: ublk's UPDATE_SIZE (online growth) needs Linux >= 6.16.
vm_kernel_suite=${ZL_VM_KERNEL_SUITE-trixie-backports}
vm_kernel_mirror=${ZL_VM_KERNEL_MIRROR:-http://deb.debian.org/debian}
vm_mem=${ZL_VM_MEM:-2G}
vm_cpus=${ZL_VM_CPUS:-$(($(nproc) > 4 ? 4 : $(nproc)))}
vm_timeout=${ZL_VM_TIMEOUT:-1200}
vm_verbose=${ZL_VM_VERBOSE:-0}
vm_offline=${ZL_VM_OFFLINE:-0}
vm_msize=512000 # 9p message size (bytes per request; larger = faster reads)
vm_default_ip=10.77.0.1/24

# Host packages the harness and the guest (which runs the host's programs)
# need, as "package:a file it installs".
vm_host_pkgs=(
	qemu-system-x86:/usr/bin/qemu-system-x86_64
	kmod:/usr/bin/kmod
	xz-utils:/usr/bin/xz
	zstd:/usr/bin/zstd
	iproute2:/usr/bin/rdma
	ibverbs-providers:/etc/libibverbs.d/rxe.driver
	ibverbs-utils:/usr/bin/ibv_rc_pingpong
	rdmacm-utils:/usr/bin/rping
	perftest:/usr/bin/ib_write_bw
	debian-archive-keyring:/usr/share/keyrings/debian-archive-trixie-stable.gpg
)
# Modules the initramfs loads to mount the 9p/overlay root.
vm_initrd_mods=(virtio_pci 9pnet_virtio 9p overlay)

# ------------------------------------------------------------- messages ----
vm_say() { echo "zl-vm: $*" >&2; }
vm_note() { [[ $vm_verbose == 1 ]] && vm_say "$@"; return 0; }
# vm_banner TITLE DETAIL: the loud "did NOT run" notice on stderr.
vm_banner() {
	{
		echo "######################################################################"
		echo "## zl-vm: $1"
		echo "## $2"
		echo "## The command in the VM did NOT run to completion: this is a FAILURE,"
		echo "## not a skip. Re-run with -v (or ZL_VM_VERBOSE=1) to see every step."
		echo "######################################################################"
	} >&2
}
# vm_fail DETAIL: harness failure before or around the boot; exits 125.
vm_fail() {
	vm_banner "HARNESS FAILURE (exit $VM_EXIT_HARNESS)" "$*"
	exit "$VM_EXIT_HARNESS"
}

vm_usage() {
	cat <<EOF
usage: vm.sh run   [options] [--] CMD [ARG...]
       vm.sh start --name N [options] [--] CMD [ARG...]
       vm.sh wait  N [--file PATH] [--timeout SECS]
       vm.sh kill  N
       vm.sh shell [options]
       vm.sh prepare | clean | help

Boots Debian's $vm_kernel_pkg under qemu (TCG) with the host root
read-only (tmpfs overlay on top) and the shared directories read-write at
their own paths, runs CMD there (in the current directory if it is shared)
with the host's environment; CMD's stdout and stderr arrive on vm.sh's.

options:
  -M, --modules LIST  kernel modules to load (comma or space separated),
                      e.g. -M nbd,ublk_drv
      --rxe           set up Soft-RoCE: rxe0 over dummy netdev zvm0 ($vm_default_ip)
      --ip CIDR       an address of zvm0 (repeatable; implies --rxe)
      --disk FILE     attach FILE as a raw virtio disk, cache=none (repeatable;
                      the guest sees them in order in ZL_VM_DISKS)
      --share DIR     share DIR read-write (repeatable; default: current dir)
  -m, --mem SIZE      guest memory (default $vm_mem)
  -c, --cpus N        guest CPUs (default $vm_cpus)
  -t, --timeout SECS  guest time limit (default $vm_timeout); then exit 124
      --name N        name of the guest (start: required)
      --offline       never call apt-get
  -v, --verbose       kernel messages and every setup step

start/wait/kill (power-cut tests): 'start' returns once qemu runs; the guest
signals readiness by creating a file in a shared directory, 'wait N --file
PATH' returns 0 when PATH exists (124 after --timeout; the guest's status,
or 1, if it stopped first); 'kill N' SIGKILLs qemu at once (fails if the
guest had already stopped); 'wait N' waits for the end and exits like 'run'.

In the guest CMD gets ZL_VM=1, ZL_VM_NAME, ZL_VM_DISKS, and with --rxe:
RXE_DEV (rxe0), RXE_NETDEV (zvm0), RXE_IP, RXE_GID_INDEX (RoCE v2 GID index
of RXE_IP), RXE_IPS, RXE_GID_INDEXES (all addresses, same order).

environment: ZL_VM_KVM=1 (use /dev/kvm instead of TCG), ZL_VM_PVH=0 (boot
the bzImage, not the uncompressed kernel's PVH entry), ZL_VM_TCG_THREAD
(multi, or single: one host thread for all vCPUs), ZL_VM_BOOT_RETRIES (2:
boots again after a kernel crash before CMD started), ZL_VM_CACHE
($vm_cache), ZL_VM_STATE ($vm_state_root), ZL_VM_KERNEL_PKG ($vm_kernel_pkg), ZL_VM_KERNEL_SUITE
($vm_kernel_suite; empty: the host's apt sources), ZL_VM_KERNEL_MIRROR, ZL_VM_MEM,
ZL_VM_CPUS, ZL_VM_TIMEOUT, ZL_VM_VERBOSE=1, ZL_VM_OFFLINE=1.

exit status: CMD's; 124 guest time limit; 125 harness failure.
EOF
}

# -------------------------------------------------- host packages, cache ----
vm_apt_updated=0
vm_apt_update() { # once per run, only when apt lacks something
	((vm_apt_updated)) && return 0
	vm_say "apt-get update"
	apt-get update -qq -o DPkg::Lock::Timeout=900 >&2 || vm_fail "apt-get update failed"
	vm_apt_updated=1
}

vm_host_packages() {
	local e want=()
	for e in "${vm_host_pkgs[@]}"; do
		[[ -e ${e#*:} ]] || want+=("${e%%:*}")
	done
	((${#want[@]})) || return 0
	((vm_offline)) && vm_fail "host packages missing (offline): ${want[*]}; install them with apt-get"
	vm_say "installing host packages: ${want[*]}"
	apt-cache show "${want[@]}" >/dev/null 2>&1 || vm_apt_update
	local inst=(env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq
		--no-install-recommends -o DPkg::Lock::Timeout=900 "${want[@]}")
	if ! "${inst[@]}" >&2; then
		vm_apt_update
		"${inst[@]}" >&2 || vm_fail "apt-get install ${want[*]} failed"
	fi
}

# The kernel suite's private apt: its own source list, package lists and
# archive cache under $vm_cache/apt/SUITE (ZL_VM_KERNEL_SUITE empty: none,
# the host's apt). vm_kapt holds the apt options that select it.
vm_kapt=()
vm_kapt_lists=/var/lib/apt/lists
vm_kapt_updated=0
vm_kapt_init() {
	[[ -n $vm_kernel_suite ]] || return 0
	[[ $vm_kernel_suite =~ ^[a-z][a-z0-9-]*$ ]] || vm_fail "bad ZL_VM_KERNEL_SUITE '$vm_kernel_suite' (e.g. trixie-backports)"
	local d=$vm_cache/apt/$vm_kernel_suite line
	line="deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $vm_kernel_mirror $vm_kernel_suite main"
	mkdir -p "$d/lists/partial" "$d/archives/partial" || vm_fail "cannot write to $d"
	[[ $(cat "$d/sources.list" 2>/dev/null) == "$line" ]] || echo "$line" >"$d/sources.list" ||
		vm_fail "cannot write $d/sources.list"
	vm_kapt=(-o "Dir::Etc::sourcelist=$d/sources.list" -o Dir::Etc::sourceparts=-
		-o "Dir::State::lists=$d/lists" -o "Dir::Cache=$d" -o "Dir::Cache::archives=$d/archives"
		-o APT::Get::List-Cleanup=0)
	vm_kapt_lists=$d/lists
}
# vm_kapt_update: apt-get update of the kernel's suite, once per run.
vm_kapt_update() {
	if [[ -z $vm_kernel_suite ]]; then
		vm_apt_update
		return 0
	fi
	((vm_kapt_updated)) && return 0
	vm_say "apt-get update ($vm_kernel_suite, for the guest's kernel)"
	apt-get "${vm_kapt[@]}" update -qq >&2 ||
		vm_fail "apt-get update of $vm_kernel_suite ($vm_kernel_mirror) failed: is the mirror reachable, and does /usr/share/keyrings/debian-archive-keyring.gpg hold its keys (apt-get install debian-archive-keyring)? ZL_VM_KERNEL_SUITE= uses the host's apt sources"
	vm_kapt_updated=1
}

# vm_candidate WHERE PKG: "name version" apt would download for PKG from
# WHERE (host: the host's sources; kernel: the kernel's suite); a meta
# package (linux-image-amd64) is followed to the versioned one it depends
# on. The answer is kept in the cache until those package lists change.
vm_candidate() {
	local where=$1 pkg=$2 memo name ver lists=/var/lib/apt/lists o=()
	[[ $where == kernel ]] && { o=("${vm_kapt[@]}"); lists=$vm_kapt_lists; }
	memo=$vm_cache/resolved/${where}-${vm_kernel_suite:-host}/$pkg
	[[ $where == kernel ]] || memo=$vm_cache/resolved/host/$pkg
	if [[ -s $memo && $memo -nt $lists ]]; then
		cat "$memo"
		return 0
	fi
	name=$(apt-cache "${o[@]}" depends "$pkg" 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
	[[ -n $name ]] || name=$pkg
	ver=$(apt-cache "${o[@]}" policy "$name" 2>/dev/null | sed -n 's/^ *Candidate: //p' | head -n1)
	[[ -n $ver && $ver != "(none)" ]] || return 0
	mkdir -p "${memo%/*}" && echo "$name $ver" >"$memo"
	echo "$name $ver"
}

# vm_unpack WHERE DIR PKG=VERSION...: apt-get download the packages (from
# WHERE, as vm_candidate), unpack them all into DIR.
vm_unpack() {
	local where=$1 dir=$2 tmp log o=() upd=vm_apt_update d
	shift 2
	[[ -e $dir/.unpacked ]] && return 0
	((vm_offline)) && vm_fail "$* not in $vm_cache (offline)"
	[[ $where == kernel ]] && { o=("${vm_kapt[@]}"); upd=vm_kapt_update; }
	tmp=$(mktemp -d "$vm_cache/dl.XXXXXX") || vm_fail "cannot write to $vm_cache"
	log=$tmp/apt.log
	vm_say "downloading $*"
	if ! (cd "$tmp" && apt-get "${o[@]}" download -q "$@") >"$log" 2>&1; then
		$upd
		(cd "$tmp" && apt-get "${o[@]}" download -q "$@") >"$log" 2>&1 || {
			cat "$log" >&2
			rm -rf "$tmp"
			vm_fail "apt-get download $* failed"
		}
	fi
	local debs=("$tmp"/*.deb)
	[[ -f ${debs[0]} ]] || { rm -rf "$tmp"; vm_fail "apt-get download $* left no .deb"; }
	mkdir -p "$tmp/root"
	for d in "${debs[@]}"; do
		dpkg-deb -x "$d" "$tmp/root" || { rm -rf "$tmp"; vm_fail "dpkg-deb -x $d failed"; }
	done
	rm -rf "$dir"
	mkdir -p "${dir%/*}"
	mv "$tmp/root" "$dir" && touch "$dir/.unpacked" || vm_fail "cannot move $* into $dir"
	rm -rf "$tmp"
}

# Sets vm_kdir (unpacked kernel package), vm_kver (uname -r of the guest).
# A kernel package that carries its image and modules in packages of its
# own (trixie's linux-image-V depends on linux-binary-V, linux-modules-V
# and linux-base-V of the same version) has them unpacked beside it.
vm_kernel() {
	local r='' name ver parts=() p
	vm_kapt_init
	if ((!vm_offline)); then
		r=$(vm_candidate kernel "$vm_kernel_pkg")
		[[ -n $r ]] || { vm_kapt_update; r=$(vm_candidate kernel "$vm_kernel_pkg"); }
		[[ -n $r ]] || vm_fail "apt knows no package $vm_kernel_pkg in ${vm_kernel_suite:-the host sources} (set ZL_VM_KERNEL_PKG / ZL_VM_KERNEL_SUITE)"
	else
		r=$(cd "$vm_cache/kernel" 2>/dev/null && ls -d linux-image-*/.unpacked 2>/dev/null | sort -V | tail -n1)
		[[ -n $r ]] || vm_fail "no kernel in $vm_cache (offline)"
		r=${r%/.unpacked}
		r="${r%%_*} ${r#*_}"
	fi
	read -r name ver <<<"$r"
	vm_kdir=$vm_cache/kernel/${name}_$ver
	if [[ ! -e $vm_kdir/.unpacked ]]; then
		parts=("$name=$ver")
		for p in $(apt-cache "${vm_kapt[@]}" depends "$name" 2>/dev/null |
			sed -n 's/^ *Depends: \(linux-\(binary\|modules\|base\)-[0-9][^ ]*\)$/\1/p'); do
			parts+=("$p=$ver")
		done
		vm_unpack kernel "$vm_kdir" "${parts[@]}"
	fi
	vm_kdir=$(cd "$vm_kdir" && pwd -P)
	local m
	for m in "$vm_kdir"/lib/modules/* "$vm_kdir"/usr/lib/modules/*; do
		[[ -d $m ]] && { vm_kver=${m##*/}; vm_kmods=$m; break; }
	done
	[[ -n ${vm_kver:-} ]] || vm_fail "$name has no lib/modules/<version>"
	vm_vmlinuz=$vm_kdir/boot/vmlinuz-$vm_kver
	[[ -r $vm_vmlinuz ]] || vm_vmlinuz=$vm_kmods/vmlinuz
	[[ -r $vm_vmlinuz ]] || vm_fail "$name has neither boot/vmlinuz-$vm_kver nor lib/modules/$vm_kver/vmlinuz"
	[[ ${ZL_VM_PVH:-1} == 0 ]] || vm_pvh_kernel
	if [[ ! -s $vm_kmods/modules.dep ]]; then
		vm_note "depmod $vm_kver"
		depmod -b "${vm_kmods%/lib/modules/*}" "$vm_kver" || vm_fail "depmod for $vm_kver failed"
	fi
}

# vm_pvh_kernel: boot the uncompressed kernel through its PVH entry point
# (qemu loads an ELF kernel with a Xen PHYS32_ENTRY note itself): under TCG
# this saves the real-mode setup and the decompression of the bzImage in
# the guest, 8-13 s of a 17-30 s boot measured on the project's 2-core
# machine at load 9-13 (vmlinux-pvh, extracted once into the cache). A
# kernel whose payload is not zstd or that has no PVH note boots as before
# (the bzImage), said on stderr; ZL_VM_PVH=0 always boots the bzImage.
vm_pvh_kernel() {
	local out=$vm_kdir/vmlinux-pvh tmp why
	if [[ -s $out ]]; then
		vm_vmlinuz=$out
		return 0
	fi
	[[ -e $vm_kdir/vmlinux-pvh.none ]] && return 0
	tmp=$(mktemp "$vm_kdir/vmlinux-pvh.XXXXXX") || vm_fail "cannot write to $vm_kdir"
	if why=$(/usr/bin/python3 - "$vm_vmlinuz" "$tmp" 2>&1 <<'PY'
import struct, subprocess, sys
src, dst = sys.argv[1], sys.argv[2]
d = open(src, 'rb').read()
if d[0x202:0x206] != b'HdrS':
    sys.exit('not a bzImage')
setup_sects = d[0x1f1] or 4
off, length = struct.unpack_from('<II', d, 0x248)  # payload_offset, payload_length
p = d[(setup_sects + 1) * 512 + off:][:length]
if p[:4] != b'\x28\xb5\x2f\xfd':
    sys.exit('the payload is not zstd')
size = struct.unpack_from('<I', p, len(p) - 4)[0]  # the kernel's size_append
k = subprocess.run(['zstd', '-q', '-dc'], input=p[:-4], stdout=subprocess.PIPE).stdout
if len(k) != size or k[:4] != b'\x7fELF':
    sys.exit('zstd gave %d bytes, want an ELF of %d' % (len(k), size))
# ELF note "Xen", type 18 (XEN_ELFNOTE_PHYS32_ENTRY): the PVH entry point.
if not any(struct.pack('<III', 4, n, 18) + b'Xen\0' in k for n in (4, 8)):
    sys.exit('no PVH entry note')
open(dst, 'wb').write(k)
PY
	) && chmod 0644 "$tmp" && mv "$tmp" "$out"; then
		vm_note "extracted $out (PVH boot)"
		vm_vmlinuz=$out
	else
		rm -f "$tmp"
		vm_say "no PVH boot for $vm_kver (${why##*$'\n'}): booting the bzImage"
		: >"$vm_kdir/vmlinux-pvh.none"
	fi
}

# Sets vm_initrd; builds it when init.sh, the module list, the kernel or
# busybox changed (the name is a hash of all of them).
vm_initramfs() {
	local bb_ver r='' bbdir hash tmp line ko m
	((vm_offline)) || r=$(vm_candidate host busybox-static)
	if [[ -n $r ]]; then
		bb_ver=${r#* }
	else
		bb_ver=$(cd "$vm_cache/busybox" 2>/dev/null && ls | sort -V | tail -n1)
		[[ -n $bb_ver ]] || vm_fail "apt knows no busybox-static and none is cached"
	fi
	bbdir=$vm_cache/busybox/$bb_ver
	vm_unpack host "$bbdir" "busybox-static=$bb_ver"
	[[ -x $bbdir/bin/busybox ]] || vm_fail "busybox-static has no bin/busybox"
	hash=$({
		cat "$VM_HERE/init.sh"
		echo "${vm_initrd_mods[*]} $vm_kdir $bb_ver sh-link"
	} | sha256sum | cut -c1-16)
	vm_initrd=$vm_kdir/initrd-zvm-$hash.img
	[[ -s $vm_initrd ]] && return 0
	vm_say "building the initramfs for $vm_kver"
	tmp=$(mktemp -d "$vm_cache/initrd.XXXXXX") || vm_fail "cannot write to $vm_cache"
	mkdir -p "$tmp/bin" "$tmp/lib/zvm"
	cp "$bbdir/bin/busybox" "$tmp/bin/busybox"
	ln -s busybox "$tmp/bin/sh" # the #! of /init
	cp "$VM_HERE/init.sh" "$tmp/init" && chmod 0755 "$tmp/init"
	: >"$tmp/lib/zvm/modules.order"
	# "insmod PATH" lines in dependency order; "builtin NAME" needs nothing.
	while read -r line; do
		[[ $line == insmod\ * ]] || continue
		ko=${line#insmod }
		ko=${ko%% *}
		m=${ko##*/}
		m=${m%.xz}
		grep -qxF "$m" "$tmp/lib/zvm/modules.order" && continue
		case $ko in
		*.xz) xz -dc "$ko" >"$tmp/lib/zvm/$m" ;;
		*.ko) cp "$ko" "$tmp/lib/zvm/$m" ;;
		*) vm_fail "unsupported module file $ko" ;;
		esac || vm_fail "cannot copy module $ko"
		echo "$m" >>"$tmp/lib/zvm/modules.order"
	done < <(modprobe -d "${vm_kmods%/lib/modules/*}" -S "$vm_kver" --show-depends -a "${vm_initrd_mods[@]}")
	[[ -s $tmp/lib/zvm/modules.order ]] || vm_fail "modprobe --show-depends found none of: ${vm_initrd_mods[*]}"
	# Uncompressed newc archive: nothing to unpack under slow emulation.
	(cd "$tmp" && find . -mindepth 1 ! -name '*.img' | "$bbdir/bin/busybox" cpio -o -H newc -R 0:0 >"$tmp/initrd.img") 2>/dev/null ||
		vm_fail "cannot build the initramfs (cpio)"
	find "$vm_kdir" -maxdepth 1 -name 'initrd-zvm-*.img' -delete
	mv "$tmp/initrd.img" "$vm_initrd" || vm_fail "cannot store $vm_initrd"
	rm -rf "$tmp"
}

# Everything a boot needs, under the cache lock (parallel runs wait).
vm_prepare() {
	[[ $(id -u) == 0 ]] || vm_fail "vm.sh must run as root (apt-get; qemu shares the whole host root)"
	[[ $(uname -m) == x86_64 ]] || vm_fail "vm.sh supports x86_64 hosts only"
	case $vm_cache/ in
	/tmp/* | /var/tmp/*) vm_fail "ZL_VM_CACHE=$vm_cache: the guest mounts fresh /tmp and /var/tmp, so the cache must live elsewhere" ;;
	esac
	mkdir -p "$vm_cache" || vm_fail "cannot create $vm_cache"
	exec {vm_lock}>"$vm_cache/lock" || vm_fail "cannot open $vm_cache/lock"
	flock -w 1800 "$vm_lock" || vm_fail "waited 30 min for $vm_cache/lock"
	vm_host_packages
	vm_kernel
	vm_initramfs
	exec {vm_lock}>&-
}

# ---------------------------------------------------------------- boots ----
vm_mods=''
vm_rxe=0
vm_ips=()
vm_disks=()
vm_shares=()
vm_name=''
vm_cmd=()

# vm_parse ARGS...: options, then the command (after "--" or the first word).
vm_parse() {
	while (($#)); do
		case $1 in
		-M | --modules) vm_mods+=" ${2:?$1 needs a value}"; shift ;;
		--rxe) vm_rxe=1 ;;
		--ip) vm_ips+=("${2:?--ip needs A.B.C.D/N}"); vm_rxe=1; shift ;;
		--disk) vm_disks+=("${2:?--disk needs a file}"); shift ;;
		--share) vm_shares+=("${2:?--share needs a directory}"); shift ;;
		-m | --mem) vm_mem=${2:?$1 needs a size}; shift ;;
		-c | --cpus) vm_cpus=${2:?$1 needs a number}; shift ;;
		-t | --timeout) vm_timeout=${2:?$1 needs seconds}; shift ;;
		--name) vm_name=${2:?--name needs a name}; shift ;;
		--offline) vm_offline=1 ;;
		-v | --verbose) vm_verbose=1 ;;
		-h | --help) vm_usage; exit 0 ;;
		--) shift; vm_cmd=("$@"); return 0 ;;
		-*) vm_fail "unknown option '$1' (see vm.sh help)" ;;
		*) vm_cmd=("$@"); return 0 ;;
		esac
		shift
	done
}

vm_check_args() {
	local a d i
	[[ $vm_timeout =~ ^[1-9][0-9]*$ ]] || vm_fail "bad --timeout '$vm_timeout' (want seconds > 0)"
	[[ $vm_cpus =~ ^[1-9][0-9]*$ ]] || vm_fail "bad --cpus '$vm_cpus'"
	[[ $vm_mem =~ ^[1-9][0-9]*[MG]?$ ]] || vm_fail "bad --mem '$vm_mem' (e.g. 2G, 512M)"
	[[ -z $vm_name || $vm_name =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] ||
		vm_fail "bad --name '$vm_name' (letters, digits, . _ -)"
	vm_mods=${vm_mods//,/ }
	[[ $vm_mods =~ ^[A-Za-z0-9_\ -]*$ ]] || vm_fail "bad module list '$vm_mods'"
	((vm_rxe && ${#vm_ips[@]} == 0)) && vm_ips=("$vm_default_ip")
	for a in "${vm_ips[@]}"; do
		[[ $a =~ ^([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}$ ]] || vm_fail "bad --ip '$a' (want A.B.C.D/N)"
	done
	for i in "${!vm_disks[@]}"; do
		[[ -f ${vm_disks[i]} && -w ${vm_disks[i]} ]] ||
			vm_fail "--disk ${vm_disks[i]}: not a writable file (create it, e.g. truncate -s 64M FILE)"
		vm_disks[i]=$(realpath "${vm_disks[i]}")
	done
	((${#vm_shares[@]})) || vm_shares=("$PWD")
	for i in "${!vm_shares[@]}"; do
		d=$(cd "${vm_shares[i]}" 2>/dev/null && pwd -P) || vm_fail "--share ${vm_shares[i]}: no such directory"
		[[ $d != / ]] || vm_fail "refusing to share / read-write (use --share DIR)"
		[[ $d != *[[:cntrl:]]* ]] || vm_fail "--share $d: control characters in the path"
		vm_shares[i]=$d
	done
	vm_share_checkout
}

# vm_share_checkout: the checkout vm.sh belongs to is shared read-only at
# its own path unless a --share already holds it. The host root reaches the
# guest, but not its /tmp, /var/tmp, /run or /dev/shm (fresh there): a clone
# under /tmp would otherwise have no test scripts in the guest. Then the
# shares are sorted so that a directory is mounted before one inside it
# (the build tree inside the read-only checkout stays read-write).
vm_share_ro=()
vm_share_checkout() {
	local src d ro=() sorted=() i
	vm_share_first=${vm_shares[0]}
	src=$(cd "$VM_HERE/../.." && pwd -P) || vm_fail "cannot find the checkout of $VM_HERE"
	for d in "${vm_shares[@]}"; do
		[[ $src == "$d" || $src == "$d"/* ]] && src=''
	done
	[[ -n $src ]] && vm_shares+=("$src")
	mapfile -t sorted < <(printf '%s\n' "${vm_shares[@]}" | LC_ALL=C sort -u)
	for d in "${sorted[@]}"; do
		[[ $d == "$src" ]] && ro+=(1) || ro+=(0)
	done
	vm_shares=("${sorted[@]}")
	vm_share_ro=("${ro[@]}")
	for i in "${!vm_shares[@]}"; do
		vm_note "share ${vm_shares[i]}$( ((vm_share_ro[i])) && echo ' (read-only: the checkout)')"
	done
}

# vm_setup_run STATE_DIR SHELL(0/1): the run directory the guest mounts.
vm_setup_run() {
	local sd=$1 shell=$2 run=$1/run cwd n
	mkdir -p "$run" || vm_fail "cannot create $run"
	cp "$VM_HERE/guest.sh" "$run/guest.sh" || vm_fail "cannot copy guest.sh"
	{
		printf 'ZVM_%s=%q\n' NAME "${vm_name:-run}" KVER "$vm_kver" MODDIR "$vm_kmods" \
			MODULES "$vm_mods" RXE "$vm_rxe" DISKS "${#vm_disks[@]}" MSIZE "$vm_msize" \
			VERBOSE "$vm_verbose" SHELL "$shell"
		printf 'ZVM_SHARES=('
		printf ' %q' "${vm_shares[@]}"
		printf ' )\nZVM_SHARE_RO=('
		printf ' %q' "${vm_share_ro[@]}"
		printf ' )\nZVM_FAKE_CRASH=%q\n' "${ZL_VM_FAKE_BOOT_CRASH:-0}"
		printf 'ZVM_IPS=('
		printf ' %q' "${vm_ips[@]}"
		printf ' )\n'
	} >"$run/config"
	# The command runs where it was started if that is shared, else in the
	# first shared directory.
	cwd=$(pwd -P)
	local inside=0 i d
	for i in "${!vm_shares[@]}"; do
		d=${vm_shares[i]}
		((vm_share_ro[i])) && continue
		[[ $cwd == "$d" || $cwd == "$d"/* ]] && inside=1
	done
	((inside)) || cwd=$vm_share_first
	{
		echo "# the command of guest ${vm_name:-run}, written by vm.sh"
		for n in $(compgen -e); do
			case $n in
			PWD | OLDPWD | SHLVL | _ | TMPDIR | TERM | DISPLAY | SSH_* | XDG_* | DBUS_* | ZL_VM* | RXE_*) continue ;;
			esac
			printf 'export %s=%q\n' "$n" "${!n}"
		done
		echo 'export TERM=dumb'
		((shell)) && echo 'export TERM=linux'
		printf 'cd %q || exit 125\n' "$cwd"
		printf 'exec'
		printf ' %q' "${vm_cmd[@]}"
		printf '\n'
	} >"$run/cmd"
}

# vm_qemu_argv STATE_DIR SHELL(0/1): sets vm_qemu.
vm_qemu_argv() {
	local sd=$1 shell=$2 i append
	append="console=ttyS0 panic=-1 oops=panic mitigations=off 8250.nr_uarts=1"
	append+=" i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd zvm.msize=$vm_msize"
	if ((vm_verbose)); then append+=" loglevel=7"; else append+=" quiet loglevel=3"; fi
	local tcg=${ZL_VM_TCG_THREAD:-multi}
	[[ $tcg == multi || $tcg == single ]] || vm_fail "ZL_VM_TCG_THREAD=$tcg: want multi or single"
	local accel=(-accel "tcg,thread=$tcg" -cpu max)
	if [[ ${ZL_VM_KVM:-0} == 1 ]]; then
		[[ -w /dev/kvm ]] || vm_fail "ZL_VM_KVM=1 but /dev/kvm is not usable"
		accel=(-accel kvm -cpu host)
	fi
	vm_qemu=(qemu-system-x86_64 -name "zl-vm-${vm_name:-run}" -machine pc "${accel[@]}"
		-smp "$vm_cpus" -m "$vm_mem" -nodefaults -no-user-config -no-reboot
		-display none -pidfile "$sd/qemu.pid"
		-kernel "$vm_vmlinuz" -initrd "$vm_initrd" -append "$append")
	# Console (kernel and harness messages): vm.sh's stderr, or the terminal.
	# qemu writes into two pipes that vm_boot copies to vm.sh's stdout and
	# stderr (opening /dev/fd/N itself would give qemu its own file offset
	# when they are regular files, and both would overwrite each other).
	if ((shell)); then
		vm_qemu+=(-chardev stdio,id=zcon,signal=off)
	else
		vm_qemu+=(-chardev "file,id=zcon,path=${sd//,/,,}/err.pipe")
	fi
	vm_qemu+=(-serial chardev:zcon
		-device virtio-serial-pci,id=zser
		-chardev "file,id=zout,path=${sd//,/,,}/out.pipe"
		-device virtserialport,bus=zser.0,chardev=zout,name=zvm.out
		-chardev "file,id=zerr,path=${sd//,/,,}/err.pipe"
		-device virtserialport,bus=zser.0,chardev=zerr,name=zvm.err
		-device virtio-rng-pci
		-fsdev local,id=zvmroot,path=/,security_model=none,readonly=on,multidevs=remap
		-device virtio-9p-pci,fsdev=zvmroot,mount_tag=zvmroot
		-fsdev "local,id=zvmrun,path=${sd//,/,,}/run,security_model=none"
		-device virtio-9p-pci,fsdev=zvmrun,mount_tag=zvmrun)
	for i in "${!vm_shares[@]}"; do
		local rof=''
		((vm_share_ro[i])) && rof=,readonly=on
		vm_qemu+=(-fsdev "local,id=zvmshare$i,path=${vm_shares[i]//,/,,},security_model=none,multidevs=remap$rof"
			-device "virtio-9p-pci,fsdev=zvmshare$i,mount_tag=zvmshare$i")
	done
	for i in "${!vm_disks[@]}"; do
		vm_qemu+=(-drive "file=${vm_disks[i]//,/,,},if=none,id=zvmdisk$i,format=raw,cache=none"
			-device "virtio-blk-pci,drive=zvmdisk$i,serial=zvmdisk$i")
	done
	vm_note "qemu: ${vm_qemu[*]}"
}

# vm_boot_crashed STATE_DIR: true when the guest's kernel crashed (Oops,
# panic, BUG) before the command started: no status, no setup failure, no
# "started" mark from guest.sh, a crash line on the console. Seen under
# multi-threaded TCG: "Oops: int3" in sched_clock_cpu while the kernel
# patches its own text at boot, an emulator fault, not the test's.
vm_boot_crashed() {
	local sd=$1
	[[ ! -e $sd/killed && ! -s $sd/run/status && ! -s $sd/run/failure && ! -e $sd/run/started ]] ||
		return 1
	vm_crash_line=$(grep -a -m1 -E 'Kernel panic|Oops|BUG:|general protection fault' "$sd/console" 2>/dev/null) ||
		return 1
}

# vm_boot STATE_DIR: runs qemu to its end, records "CODE WHY" in
# STATE_DIR/result and returns CODE (the command's status, 124, 125, or 137
# after a power cut by 'vm.sh kill'). A guest whose kernel crashed while
# booting (vm_boot_crashed) is booted again, at most ZL_VM_BOOT_RETRIES
# times (2), within the same time limit; each retry is said on stderr.
vm_boot() {
	local sd=$1 rc code why t0 cat_out cat_err fd p left attempt
	local retries=${ZL_VM_BOOT_RETRIES:-2}
	[[ $retries =~ ^[0-9]+$ ]] || retries=2
	t0=$(date +%s)
	mkfifo "$sd/out.pipe" "$sd/err.pipe" || vm_fail "cannot create pipes in $sd"
	for ((attempt = 1; ; attempt++)); do
		rm -f "$sd/run/status" "$sd/run/failure" "$sd/run/started"
		echo "$attempt" >"$sd/run/attempt"
		left=$((vm_timeout - ($(date +%s) - t0)))
		((left > 0)) || left=1
		rc=0
		cat "$sd/out.pipe" &
		cat_out=$!
		# The console (kernel messages) is kept to tell a crash while booting.
		tee "$sd/console" <"$sd/err.pipe" >&2 &
		cat_err=$!
		if ((vm_shell)); then
			# qemu reads the terminal: it must stay in the foreground group.
			timeout --foreground -k 10 "$left" "${vm_qemu[@]}" 0<&0 &
		else
			timeout -k 10 "$left" "${vm_qemu[@]}" </dev/null &
		fi
		echo $! >"$sd/timeout.pid"
		# (timeout re-raises qemu's SIGKILL after a power cut: no "Killed" line)
		{ wait $! || rc=$?; } 2>/dev/null
		# EOF for a copier whose pipe qemu never opened (O_RDWR: never blocks).
		for p in out err; do
			exec {fd}<>"$sd/$p.pipe" && exec {fd}>&-
		done
		wait "$cat_out" "$cat_err"
		vm_boot_crashed "$sd" || break
		if ((attempt > retries)); then
			vm_banner "EMULATOR CRASH WHILE BOOTING (exit $VM_EXIT_HARNESS)" \
				"the guest kernel crashed before the command started, $attempt boots in a row ('$vm_crash_line'); ZL_VM_BOOT_RETRIES=$retries"
			code=$VM_EXIT_HARNESS why=boot-crash
			vm_result_write "$sd" "$code" "$why" "$t0"
			return "$code"
		fi
		vm_say "guest ${vm_name:-run}: the kernel crashed while booting, before the command started ('$vm_crash_line'): an emulator fault, not the test's; booting again (boot $((attempt + 1)) of at most $((retries + 1)))"
	done
	if [[ -e $sd/killed ]]; then
		code=137 why=killed
	elif [[ -s $sd/run/status ]]; then
		read -r code <"$sd/run/status"
		why=exited
	elif ((rc == 124 || rc == 137)) && (($(date +%s) - t0 >= vm_timeout)); then
		code=$VM_EXIT_TIMEOUT why=timeout
		vm_banner "GUEST TIMED OUT (exit $VM_EXIT_TIMEOUT)" \
			"guest ${vm_name:-run} was stopped after its limit of ${vm_timeout}s (-t/ZL_VM_TIMEOUT)"
	elif [[ -s $sd/run/failure ]]; then
		code=$VM_EXIT_HARNESS why=harness
		vm_banner "HARNESS FAILURE (exit $VM_EXIT_HARNESS)" "guest setup failed: $(head -n1 "$sd/run/failure")"
	elif [[ -e $sd/run/started ]]; then
		code=$VM_EXIT_HARNESS why=harness
		vm_banner "HARNESS FAILURE (exit $VM_EXIT_HARNESS)" \
			"the guest stopped while the command ran, without a status (qemu exit $rc; a kernel crash? see the console lines above)"
	else
		code=$VM_EXIT_HARNESS why=harness
		vm_banner "HARNESS FAILURE (exit $VM_EXIT_HARNESS)" \
			"the guest stopped before the command started, without reporting a status (qemu exit $rc; see the console lines above)"
	fi
	[[ $code =~ ^[0-9]+$ ]] || code=$VM_EXIT_HARNESS
	vm_result_write "$sd" "$code" "$why" "$t0"
	return "$code"
}

# vm_result_write STATE_DIR CODE WHY T0: the result 'wait' and 'kill' read.
vm_result_write() {
	vm_note "guest ${vm_name:-run}: $3, status $2 after $(($(date +%s) - $4)) s"
	echo "$2 $3" >"$1/result.new" && mv "$1/result.new" "$1/result"
}

vm_shell=0
vm_cmd_run() { # run and shell
	local shell=$1 sd rc
	shift
	vm_shell=$shell
	vm_parse "$@"
	if ((shell)); then
		[[ -t 0 && -t 1 ]] || vm_fail "vm.sh shell needs a terminal"
		((${#vm_cmd[@]})) || vm_cmd=(bash -i)
	fi
	((${#vm_cmd[@]})) || vm_fail "no command given (vm.sh run [options] -- CMD...)"
	vm_check_args
	vm_prepare
	mkdir -p "$vm_state_root" || vm_fail "cannot create $vm_state_root"
	sd=$(mktemp -d "$vm_state_root/run.XXXXXX") || vm_fail "cannot create a state directory"
	vm_setup_run "$sd" "$shell"
	vm_qemu_argv "$sd" "$shell"
	trap 'rm -rf "$sd"' EXIT
	trap 'vm_say "interrupted: stopping the guest"; kill -TERM "$(cat "$sd/timeout.pid" 2>/dev/null)" 2>/dev/null; wait; exit 130' INT TERM HUP
	vm_boot "$sd"
	rc=$?
	exit "$rc"
}

vm_cmd_start() {
	local sd sup i
	vm_parse "$@"
	[[ -n $vm_name ]] || vm_fail "start needs --name N"
	((${#vm_cmd[@]})) || vm_fail "no command given (vm.sh start --name N [options] -- CMD...)"
	vm_check_args
	sd=$vm_state_root/$vm_name
	if [[ -e $sd/qemu.pid && ! -e $sd/result ]] && kill -0 "$(cat "$sd/qemu.pid")" 2>/dev/null; then
		vm_fail "guest $vm_name is already running (vm.sh kill $vm_name)"
	fi
	vm_prepare
	rm -rf "$sd"
	mkdir -p "$sd" || vm_fail "cannot create $sd"
	vm_setup_run "$sd" 0
	vm_qemu_argv "$sd" 0
	(
		trap '' HUP INT
		vm_boot "$sd"
	) </dev/null &
	sup=$!
	echo "$sup" >"$sd/supervisor.pid"
	for ((i = 0; i < 600; i++)); do
		[[ -s $sd/qemu.pid || -e $sd/result ]] && break
		kill -0 "$sup" 2>/dev/null || break
		sleep 0.1
	done
	[[ -s $sd/qemu.pid ]] || vm_fail "qemu of guest $vm_name did not start"
	vm_note "guest $vm_name started (qemu pid $(cat "$sd/qemu.pid"))"
}

# vm_result STATE_DIR -> sets vm_res_code, vm_res_why; 1 while running.
vm_result() {
	[[ -s $1/result ]] || return 1
	read -r vm_res_code vm_res_why <"$1/result"
}

vm_cmd_wait() {
	local name=${1:-} file='' limit=0 sd t0
	[[ -n $name ]] || vm_fail "usage: vm.sh wait N [--file PATH] [--timeout SECS]"
	shift
	while (($#)); do
		case $1 in
		--file) file=${2:?--file needs a path}; shift ;;
		--timeout) limit=${2:?--timeout needs seconds}; shift ;;
		*) vm_fail "wait: unknown argument '$1'" ;;
		esac
		shift
	done
	[[ $limit =~ ^[0-9]+$ ]] || vm_fail "bad --timeout '$limit'"
	sd=$vm_state_root/$name
	[[ -d $sd ]] || vm_fail "no guest named $name (vm.sh start --name $name ...)"
	t0=$SECONDS
	while :; do
		if [[ -n $file && -e $file ]]; then
			return 0
		fi
		if vm_result "$sd"; then
			if [[ -n $file ]]; then
				vm_say "guest $name stopped ($vm_res_why, status $vm_res_code) before $file appeared"
				((vm_res_code)) && exit "$vm_res_code"
				exit 1
			fi
			rm -rf "$sd"
			exit "$vm_res_code"
		fi
		if ((limit && SECONDS - t0 >= limit)); then
			vm_say "waited ${limit}s for ${file:-the end of guest $name}; the guest is still running"
			exit "$VM_EXIT_TIMEOUT"
		fi
		sleep 0.1
	done
}

vm_cmd_kill() {
	local name=${1:-} sd pid i
	[[ -n $name ]] || vm_fail "usage: vm.sh kill N"
	sd=$vm_state_root/$name
	[[ -d $sd ]] || vm_fail "no guest named $name"
	# (qemu removes its pid file when it exits)
	if vm_result "$sd" || [[ ! -s $sd/qemu.pid ]]; then
		vm_say "guest $name had already stopped (${vm_res_why:-no qemu}, status ${vm_res_code:-none}): no power cut happened"
		rm -rf "$sd"
		exit 1
	fi
	read -r pid <"$sd/qemu.pid"
	touch "$sd/killed"
	kill -KILL "$pid" 2>/dev/null || vm_fail "cannot SIGKILL qemu (pid $pid) of guest $name"
	for ((i = 0; i < 300; i++)); do
		vm_result "$sd" && break
		sleep 0.1
	done
	vm_result "$sd" || vm_fail "qemu of guest $name was killed but its supervisor did not finish"
	vm_note "guest $name: power cut (qemu pid $pid SIGKILLed)"
	rm -rf "$sd"
}

vm_main() {
	local sub=${1:-}
	(($#)) && shift
	case $sub in
	run) vm_cmd_run 0 "$@" ;;
	shell) vm_cmd_run 1 "$@" ;;
	start) vm_cmd_start "$@" ;;
	wait) vm_cmd_wait "$@" ;;
	kill) vm_cmd_kill "$@" ;;
	prepare)
		vm_parse "$@"
		vm_prepare
		vm_say "ready: kernel $vm_kver ($vm_kdir), initramfs $vm_initrd"
		;;
	clean)
		[[ $vm_cache == /?* ]] || vm_fail "refusing to remove '$vm_cache'"
		rm -rf "$vm_cache" && vm_say "removed $vm_cache"
		;;
	help | -h | --help) vm_usage ;;
	'') vm_usage >&2; exit 2 ;;
	*) vm_fail "unknown sub-command '$sub' (see vm.sh help)" ;;
	esac
}

vm_main "$@"
