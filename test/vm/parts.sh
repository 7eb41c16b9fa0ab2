# Sourced by the tests that run several parts in ONE guest boot of the test
# VM (frontends-vm.sh, test/rdma/rdma-vm.sh): a boot under TCG costs 20-35 s
# and each part's set-up more, so the vm stage boots once per group of parts
# that can share a guest. Each part still passes or fails on its own, by
# name:
#
# In the guest:
#   vm_part STATUS NAME LIMIT CMD...   runs CMD as part NAME: a header, every
#       line of its stdout and stderr prefixed "[NAME] ", at most LIMIT
#       seconds (timeout: then its whole process group is killed), and
#       whatever the part started that is still alive after it is killed
#       (a part cannot leave daemons or ports to the next). Appends
#       "start NAME" and "end NAME STATUS SECONDS" to the file STATUS (in a
#       shared directory: the host reads it). Returns CMD's status.
#   vm_parts_end STATUS: 0 when every part that ran passed.
# On the host:
#   vm_parts_report TEST STATUS VM_RC PART...: one line per expected part:
#       PASS, FAIL (its exit status; 124: its time limit), DID NOT FINISH
#       (the guest stopped while it ran: VM_RC 124 guest time limit, 125
#       harness or kernel), DID NOT RUN; a banner naming the failed parts.
#       Returns 0 only when VM_RC is 0 and every part passed.

vm_part() {
	local status=$1 name=$2 limit=$3 t0=$SECONDS rc pg tmp spid tpid p left i
	shift 3
	tmp=$(mktemp -d /tmp/zl-part.XXXXXX) && mkfifo "$tmp/out" || return 1
	echo "start $name" >>"$status"
	echo "======== part $name: start ($*)"
	sed -u "s/^/[$name] /" <"$tmp/out" &
	spid=$!
	# timeout makes itself a process group leader (its pid, written before
	# the exec): the part and everything it started without a new session.
	bash -c 'echo $$ >"$0"; exec timeout -k 20 "$@"' "$tmp/pid" "$limit" "$@" \
		</dev/null >"$tmp/out" 2>&1 &
	tpid=$!
	wait "$tpid"
	rc=$?
	read -r pg <"$tmp/pid"
	# What the part left running (it would hold the output open) goes now.
	if [[ -n $pg ]]; then
		kill -KILL -- "-$pg" 2>/dev/null
		for ((i = 0; i < 300; i++)); do
			left=''
			for p in $(pgrep -g "$pg"); do
				[[ $(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null) == [ZX] ]] || left+=" $p"
			done
			[[ -z $left ]] && break
			sleep 0.1
		done
		[[ -z $left ]] || echo "======== part $name: processes$left outlived a SIGKILL for 30 s"
	fi
	for ((i = 0; i < 300; i++)); do
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$spid" 2>/dev/null; then
		echo "======== part $name: processes outside its process group still hold its output (30 s): not shown"
		kill "$spid" 2>/dev/null
	fi
	wait "$spid"
	rm -rf "$tmp"
	echo "end $name $rc $((SECONDS - t0))" >>"$status"
	if ((rc == 0)); then
		echo "======== part $name: PASS ($((SECONDS - t0)) s)"
	elif ((rc == 124)); then
		echo "======== part $name: FAIL: not done within its limit of $limit s"
	else
		echo "======== part $name: FAIL (exit $rc, $((SECONDS - t0)) s)"
	fi
	return "$rc"
}

vm_parts_end() {
	! grep -q '^end [^ ]* [^0]' "$1"
}

vm_parts_report() {
	local test=$1 status=$2 vm_rc=$3 name line rc secs failed=()
	shift 3
	echo "$test: parts:"
	for name in "$@"; do
		line=$(grep "^end $name " "$status" 2>/dev/null | tail -n1)
		if [[ -n $line ]]; then
			read -r _ _ rc secs <<<"$line"
			if ((rc == 0)); then
				echo "  $name: PASS ($secs s of guest time)"
				continue
			fi
			echo "  $name: FAIL (exit $rc$( ((rc == 124)) && echo ': its time limit'), $secs s)"
		elif grep -qx "start $name" "$status" 2>/dev/null; then
			echo "  $name: DID NOT FINISH (the guest stopped while it ran, vm.sh exit $vm_rc$( ((vm_rc == 124)) && echo ': the guest time limit'))"
		else
			echo "  $name: DID NOT RUN (vm.sh exit $vm_rc$( ((vm_rc == 125)) && echo ': the VM harness failed, see its banner'))"
		fi
		failed+=("$name")
	done
	if ((${#failed[@]})); then
		{
			echo "######################################################################"
			echo "## $test: FAILED part(s): ${failed[*]}"
			echo "######################################################################"
		} >&2
		return 1
	fi
	((vm_rc == 0)) || {
		echo "$test: FAIL: every part passed but vm.sh exited $vm_rc" >&2
		return 1
	}
	return 0
}
