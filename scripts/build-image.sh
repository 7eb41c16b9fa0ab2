#!/usr/bin/env bash
# Builds the Zipline container image from the unmodified Dockerfile with
# rootful podman, offline: the base images debian:bookworm and
# debian:bookworm-slim are made here with debootstrap from the Debian mirror
# the host's apt already uses, so `FROM debian:bookworm` never pulls.
#
#   usage: scripts/build-image.sh [TAG] [-- PODMAN-BUILD-ARGS...]
#          scripts/build-image.sh --base-only
#
#   TAG          image tag (default localhost/zipline:dev)
#   --base-only  only install podman, configure it and make the base images
#                (test/clean-machine.sh uses this for its fresh container)
#
# Idempotent: host packages, podman configuration and base images are made
# only when missing. The base rootfs tarballs are cached in $ZL_IMAGE_CACHE
# (default /var/cache/zipline-image); parallel runs serialise on a lock there.
#
# Environment:
#   ZL_IMAGE_CACHE     tarball cache and lock directory
#   ZL_IMAGE_NETWORK   network of RUN steps (default host; empty: podman's bridge)
#   ZL_IMAGE_REBASE=1  drop the cached base images and debootstrap again
#
# Needs root. Exit status: 0 built, 1 a step failed (the message says which),
# 2 bad usage.
set -Eeuo pipefail

SUITE=bookworm
SUITE_VERSION=12
CACHE=${ZL_IMAGE_CACHE:-/var/cache/zipline-image}
NETWORK=${ZL_IMAGE_NETWORK-host}
REBASE=${ZL_IMAGE_REBASE:-0}
# Sorts after the distribution's shortnames.conf, so our alias wins.
CONF=zz-zipline-image.conf
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
START=$(date +%s)

say() { printf 'build-image [%3d s] %s\n' "$(($(date +%s) - START))" "$*" >&2; }
fail() { say "ERROR: $*"; exit 1; }
trap 'fail "line $LINENO: \"$BASH_COMMAND\" exited with $?"' ERR

tag=localhost/zipline:dev
base_only=0
extra=()
while [ $# -gt 0 ]; do
	case "$1" in
	--base-only) base_only=1 ;;
	--) shift; extra=("$@"); break ;;
	-h|--help) sed -n '7,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "build-image: unknown option $1 (see --help)" >&2; exit 2 ;;
	*) tag=$1 ;;
	esac
	shift
done
[ "$(id -u)" -eq 0 ] || { echo "build-image: must run as root (rootful podman); try: sudo $0" >&2; exit 2; }

# ------------------------------------------------------------ host packages
# podman and what rootful podman on bookworm needs: runc (see below), the
# netavark network stack, fuse-overlayfs for nested storage, debootstrap.
HOST_PKGS=(podman runc conmon golang-github-containers-common netavark aardvark-dns
	containernetworking-plugins iptables uidmap slirp4netns fuse-overlayfs catatonit
	debootstrap debian-archive-keyring)

host_packages_ensure() {
	local missing=() p log="$CACHE/apt.log"
	for p in "${HOST_PKGS[@]}"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -qx 'install ok installed' \
			|| missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	say "apt-get install ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
		apt-get update -q >>"$log" 2>&1 || true
		apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1 \
			|| { tail -n 20 "$log" >&2; fail "apt-get install of the podman stack failed (log: $log)"; }
	fi
	rm -f "$log"
}

# ------------------------------------------------------------ podman config
# file_put PATH: write stdin to PATH only when the content differs.
file_put() {
	local tmp
	tmp=$(mktemp)
	cat >"$tmp"
	if [ -f "$1" ] && cmp -s "$tmp" "$1"; then
		rm -f "$tmp"
		return 0
	fi
	mkdir -p "$(dirname "$1")"
	install -m 0644 "$tmp" "$1"
	rm -f "$tmp"
	say "wrote $1"
}

# hard_limit OPT: the hard ulimit, capped at 1048576 (also for "unlimited").
hard_limit() {
	local v
	v=$(ulimit -H "$1")
	if [ "$v" = unlimited ] || [ "$v" -gt 1048576 ]; then v=1048576; fi
	echo "$v"
}

podman_configure() {
	local nofile nproc pid_max
	# podman asks the runtime for nofile=1048576 and a large nproc; without
	# CAP_SYS_RESOURCE (as on the project machines) setrlimit fails, so ask
	# for no more than this process may have.
	nofile=$(hard_limit -n)
	nproc=$(hard_limit -u)
	pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
	if [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
	if [ "$nproc" -gt 32768 ]; then nproc=32768; fi
	# runc: crun (bookworm's default) refuses the hybrid cgroup v1/v2 layout
	# of these machines. cgroupfs and a file events log: there is no systemd.
	file_put "/etc/containers/containers.conf.d/$CONF" <<-EOF
		# Written by Zipline's scripts/build-image.sh.
		[containers]
		default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

		[engine]
		runtime = "runc"
		cgroup_manager = "cgroupfs"
		events_logger = "file"
	EOF
	# The short name "debian" means the local images made below.
	file_put "/etc/containers/registries.conf.d/$CONF" <<-EOF
		# Written by Zipline's scripts/build-image.sh: debian:<tag> is the
		# local debootstrap image localhost/debian:<tag>, never a pull.
		[aliases]
		"debian" = "localhost/debian"
	EOF
}

# ------------------------------------------------------------ base images
# apt_sources: the host's Debian sources as "URI SUITE COMPONENT" lines.
apt_sources() {
	# shellcheck disable=SC2016
	apt-get indextargets --format '$(SITE) $(RELEASE) $(COMPONENT)' 'Identifier: Packages' \
		2>/dev/null | sed 's#/ # #' | sort -u
}

# rootfs_sources DIR: deb822 sources for SUITE, -updates and -security from
# the host's mirrors, one stanza per mirror.
rootfs_sources() {
	apt_sources | awk -v s="$SUITE" '
		$2 == s || $2 == s "-updates" || $2 == s "-security" {
			if (!($1 in seen)) { seen[$1] = 1; uris[++n] = $1 }
			if (index(" " su[$1] " ", " " $2 " ") == 0) su[$1] = su[$1] " " $2
			if (index(" " co[$1] " ", " " $3 " ") == 0) co[$1] = co[$1] " " $3
		}
		END {
			for (i = 1; i <= n; i++) {
				u = uris[i]
				printf "Types: deb\nURIs: %s\nSuites:%s\nComponents:%s\n", u, su[u], co[u]
				printf "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
			}
		}'
}

# rootfs_tune DIR: what the official Debian container images set up.
rootfs_tune() {
	local r=$1 sources
	sources=$(rootfs_sources)
	if [ -n "$sources" ]; then
		rm -f "$r/etc/apt/sources.list"
		printf '%s\n' "$sources" >"$r/etc/apt/sources.list.d/debian.sources"
	fi
	# The host's proxy and release-date settings, so apt in the image reaches
	# the same mirror the same way.
	apt-config dump 2>/dev/null \
		| grep -E '^Acquire::((http|https)::Proxy|Check-Valid-Until|Check-Date)[ :]' \
		>"$r/etc/apt/apt.conf.d/90zipline-host" || rm -f "$r/etc/apt/apt.conf.d/90zipline-host"
	printf '#!/bin/sh\n# No daemon starts while an image is built.\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
	chmod 0755 "$r/usr/sbin/policy-rc.d"
	echo force-unsafe-io >"$r/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
	cat >"$r/etc/apt/apt.conf.d/docker-clean" <<-'EOF'
		DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
		APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
		Dir::Cache::pkgcache "";
		Dir::Cache::srcpkgcache "";
	EOF
	echo 'Acquire::Languages "none";' >"$r/etc/apt/apt.conf.d/docker-no-languages"
	echo 'Acquire::GzipIndexes "true";' >"$r/etc/apt/apt.conf.d/docker-gzip-indexes"
	echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$r/etc/apt/apt.conf.d/docker-autoremove-suggests"
	# podman provides these at run time.
	: >"$r/etc/resolv.conf"
	: >"$r/etc/hostname"
	rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb \
		"$r"/tmp/* "$r"/var/tmp/* "$r/var/log/bootstrap.log"
	mkdir -p "$r/var/lib/apt/lists/partial"
	find "$r/var/log" -type f -exec truncate -s 0 {} +
}

# rootfs_slim DIR: the -slim variant: dpkg leaves out documentation, manuals
# and translations (copyright files stay), and the ones present go.
rootfs_slim() {
	local r=$1 d
	cat >"$r/etc/dpkg/dpkg.cfg.d/docker" <<-'EOF'
		# slim image: no documentation, manuals or translations
		path-exclude /usr/share/doc/*
		path-include /usr/share/doc/*/copyright
		path-exclude /usr/share/man/*
		path-exclude /usr/share/groff/*
		path-exclude /usr/share/info/*
		path-exclude /usr/share/lintian/*
		path-exclude /usr/share/linda/*
		path-exclude /usr/share/locale/*
		path-include /usr/share/locale/locale.alias
	EOF
	for d in man groff info lintian linda; do
		if [ -d "$r/usr/share/$d" ]; then find "$r/usr/share/$d" -mindepth 1 -delete; fi
	done
	if [ -d "$r/usr/share/doc" ]; then
		find "$r/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
	fi
	if [ -d "$r/usr/share/locale" ]; then
		find "$r/usr/share/locale" -mindepth 1 ! -type d ! -name locale.alias -delete
	fi
	find "$r/usr/share/doc" "$r/usr/share/locale" -mindepth 1 -depth -type d -empty -delete \
		2>/dev/null || true
}

# rootfs_pack DIR TAR
rootfs_pack() {
	tar --numeric-owner --xattrs --xattrs-include=security.capability \
		--exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
		-C "$1" -cf "$2.part" .
	mv -f "$2.part" "$2"
}

base_tarballs_make() {
	local work="$CACHE/rootfs.$$" mirror try log="$CACHE/debootstrap.log"
	rm -rf "$CACHE"/rootfs.*
	mirror=$(apt_sources | awk -v s="$SUITE" '$2 == s { print $1; exit }')
	[ -n "$mirror" ] || fail "the host's apt has no '$SUITE' source to debootstrap from (apt-get indextargets shows none; run apt-get update)"
	for try in 1 2; do
		rm -rf "$work"
		mkdir -p "$work"
		say "debootstrap --variant=minbase $SUITE from $mirror (try $try, minutes)"
		if debootstrap --variant=minbase "$SUITE" "$work" "$mirror" >"$log" 2>&1; then
			break
		fi
		tail -n 5 "$log" >&2
		if [ "$try" = 2 ]; then
			rm -rf "$work"
			fail "debootstrap failed twice (log: $log)"
		fi
	done
	rm -f "$log"
	if findmnt -rno TARGET | grep -q "^$work/"; then fail "debootstrap left mounts under $work"; fi
	rootfs_tune "$work"
	rootfs_pack "$work" "$CACHE/debian-$SUITE.tar"
	rootfs_slim "$work"
	rootfs_pack "$work" "$CACHE/debian-$SUITE-slim.tar"
	rm -rf "$work"
}

base_images_ensure() {
	local v name img
	if [ "$REBASE" = 1 ]; then
		rm -f "$CACHE/debian-$SUITE.tar" "$CACHE/debian-$SUITE-slim.tar"
		podman rmi -f "localhost/debian:$SUITE" "localhost/debian:$SUITE-slim" >/dev/null 2>&1 || true
	fi
	for v in "$SUITE" "$SUITE-slim"; do
		img=localhost/debian:$v
		if ! podman image exists "$img"; then
			if [ ! -s "$CACHE/debian-$v.tar" ]; then base_tarballs_make; fi
			say "podman import $CACHE/debian-$v.tar as $img"
			podman import -q \
				--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
				--change 'CMD ["bash"]' \
				--change 'LABEL org.opencontainers.image.description=debootstrap-minbase' \
				"$CACHE/debian-$v.tar" "$img" >/dev/null
		fi
		# Every usual spelling of the name resolves locally.
		name=${v/$SUITE/$SUITE_VERSION}
		podman tag "$img" "localhost/debian:$name" \
			"docker.io/library/debian:$v" "docker.io/library/debian:$name"
	done
}

# ------------------------------------------------------------ main
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
host_packages_ensure
podman_configure
base_images_ensure
flock -u 9
exec 9>&-
if [ "$base_only" = 1 ]; then
	say "base images localhost/debian:$SUITE and :$SUITE-slim ready"
	exit 0
fi

args=(build --format docker --pull=never -f "$SRC/Dockerfile" -t "$tag")
if [ -n "$NETWORK" ]; then args+=(--network "$NETWORK"); fi
say "podman ${args[*]} ${extra[*]} $SRC"
t=$(date +%s)
podman "${args[@]}" "${extra[@]}" "$SRC"
say "built $tag in $(($(date +%s) - t)) s"
