#!/usr/bin/env python3
"""readme_test_list: README.md names every test `make test` runs, and only tests.

Usage: readme_tests.py SOURCE_DIR BUILD_DIR

The tests are the ones `ctest --test-dir BUILD_DIR -N` lists. The README's
list lies between the lines `<!-- ctest list: begin -->` and
`<!-- ctest list: end -->`; an entry is a line starting with "- " and the
lines after it up to the next entry. The test names of an entry are the
backticked words before its first ": " outside backticks, e.g.

    - `cluster_e2e`, `heal_e2e`: what they check;

A name with <...> (`deploy_chart_<example>`) stands for any word there and
must match at least one test. A listed name this build does not register
is accepted only if a CMakeLists.txt of the source tree spells it (a test of
another configuration: the fuzz targets exist only in the san build).
Exit 0 when both directions hold; 1 with what to add or remove otherwise.
"""
import os
import pathlib
import re
import subprocess
import sys

BEGIN = "<!-- ctest list: begin -->"
END = "<!-- ctest list: end -->"
NAME = re.compile(r"^[a-z0-9_<>]+$")


def ctest_names(build):
    out = subprocess.run(["ctest", "--test-dir", str(build), "-N"], check=True,
                         capture_output=True, text=True).stdout
    names = re.findall(r"^\s*Test\s+#\d+:\s+(\S+)\s*$", out, re.M)
    if not names:
        sys.exit(f"readme_test_list: FAIL: ctest lists no test in {build}:\n{out}")
    return names


def readme_entries(readme):
    """[(line number, [names])] of the list's entries; exits on a bad list."""
    lines = readme.read_text().splitlines()
    try:
        b = lines.index(BEGIN)
        e = lines.index(END, b)
    except ValueError:
        sys.exit(f"readme_test_list: FAIL: {readme} has no '{BEGIN}' ... '{END}' lines "
                 "around the list of tests")
    entries, bad = [], []
    cur = None
    for no, line in enumerate(lines[b + 1:e], start=b + 2):
        if line.startswith("- "):
            cur = [no, line[2:]]
            entries.append(cur)
        elif cur is not None and line.strip():
            cur[1] += " " + line.strip()
    result = []
    for no, text in entries:
        # the part before the first ": " outside backticks
        head, inside = [], False
        for i, c in enumerate(text):
            if c == "`":
                inside = not inside
            elif not inside and text.startswith(": ", i):
                break
            head.append(c)
        else:
            bad.append(f"README.md:{no}: no ': ' after the test names")
            continue
        names = re.findall(r"`([^`]*)`", "".join(head))
        for n in names:
            if not NAME.match(n):
                bad.append(f"README.md:{no}: `{n}` before the ': ' is not a test name "
                           "(only test names are backticked there)")
        if not names:
            bad.append(f"README.md:{no}: an entry without a backticked test name before its ': '")
        result.append((no, names))
    if bad:
        sys.exit("readme_test_list: FAIL:\n  " + "\n  ".join(bad))
    return result


def cmake_lists(src):
    """The CMakeLists.txt of the source tree (not of build trees inside it)."""
    for dirpath, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build")) and d != "node_modules"
                   and not (pathlib.Path(dirpath, d) / "CMakeCache.txt").exists()]
        if "CMakeLists.txt" in files:
            yield pathlib.Path(dirpath, "CMakeLists.txt")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, build = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    known = ctest_names(build)
    entries = readme_entries(src / "README.md")
    cmake_text = "\n".join(p.read_text() for p in cmake_lists(src))
    listed, extra = set(), []
    for no, names in entries:
        for n in names:
            if "<" in n:
                rx = re.compile("^" + re.sub(r"<[^>]*>", "[a-z0-9_]+", re.escape(n)) + "$")
                hit = [k for k in known if rx.match(k)]
                if not hit:
                    extra.append(f"README.md:{no}: `{n}` matches no test of this build")
                listed.update(hit)
            elif n in known:
                listed.add(n)
            elif not re.search(r"(?<![A-Za-z0-9_])" + re.escape(n) + r"(?![A-Za-z0-9_])", cmake_text):
                extra.append(f"README.md:{no}: `{n}` is not a test (neither ctest in {build} "
                             "nor any CMakeLists.txt knows it): remove it or correct the name")
    missing = [k for k in known if k not in listed]
    if not missing and not extra:
        print(f"readme_test_list: ok: the {len(known)} tests of {build} are all in README.md "
              f"({len(entries)} entries), and it names no other")
        return 0
    msg = ["readme_test_list: FAIL: README.md's list of tests ('## Tests') is not what ctest runs."]
    if missing:
        msg.append(f"Tests ctest knows that README.md does not name ({len(missing)}). Add to the "
                   f"list between '{BEGIN}' and '{END}' one line per test (or one line for a "
                   "group), saying what it checks:")
        msg += [f"- `{k}`: WHAT IT CHECKS;" for k in missing]
    if extra:
        msg.append("Names in README.md that are not tests:")
        msg += ["  " + x for x in extra]
    print("\n".join(msg), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
