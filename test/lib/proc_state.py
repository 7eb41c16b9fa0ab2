"""The state letter of a process as /proc/PID/stat gives it (R, S, D, T, t,
Z, X, ...), or None when there is no such process: shared by the tools in
test/lib that ask whether a process they were told of runs."""


def state(pid):
    try:
        with open('/proc/%d/stat' % pid) as f:
            # The command name (field 2) may hold spaces and parentheses:
            # the state is the first field after its closing one.
            return f.read().rsplit(')', 1)[1].split()[0]
    except (OSError, IndexError):
        return None
