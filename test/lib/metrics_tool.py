#!/usr/bin/python3
"""Scrapes Zipline daemons' /metrics with prometheus_client's text parser
(Debian's python3-prometheus-client): an oracle independent of the
daemons' own code.

  metrics_tool.py sum NAME [LABEL=VALUE...] -- URL...
      prints the sum over the URLs of every sample called NAME whose labels
      include every LABEL=VALUE (0 when none); fails when a URL does not
      answer 200 or does not parse.
  metrics_tool.py names URL
      prints every sample name the URL exposes, one per line.
  metrics_tool.py peak PID NAME[,LABEL=VALUE...]... -- URL...
      while process PID lives (at least one round), every 0.2 s sums each
      NAME over the URLs as `sum` does; prints each one's largest sum, one
      per line, in order (a gauge's peak under a load PID makes).
Importable too: scrape(URL) gives the samples, value(SAMPLES, NAME,
**LABELS) their sum as above.
"""
import os
import sys
import time
import urllib.request

import proc_state  # test/lib, next to this file

from prometheus_client.parser import text_string_to_metric_families


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        if r.status != 200:
            sys.exit('%s answered %d' % (url, r.status))
        ctype = r.headers.get('Content-Type', '')
        if not ctype.startswith('text/plain'):
            sys.exit('%s: Content-Type %r, not the text format' % (url, ctype))
        text = r.read().decode()
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def value(samples, name, **labels):
    """Sum of the samples called name whose labels include labels."""
    return sum(s.value for s in samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def running(pid):
    """Whether pid lives (a zombie, ended but not yet reaped, does not)."""
    return proc_state.state(pid) not in (None, 'Z')


def peak(argv):
    sep = argv.index('--')
    pid, specs, urls = int(argv[0]), argv[1:sep], argv[sep + 1:]
    wants = []
    for spec in specs:
        name, *labels = spec.split(',')
        wants.append((name, dict(a.split('=', 1) for a in labels)))
    best = [None] * len(wants)
    while True:
        alive = running(pid)
        per_url = [scrape(url) for url in urls]
        for i, (name, want) in enumerate(wants):
            v = sum(value(smp, name, **want) for smp in per_url)
            best[i] = v if best[i] is None else max(best[i], v)
        if not alive:
            break
        time.sleep(0.2)
    for v in best:
        print(int(v) if v == int(v) else v)
    return 0


def main(argv):
    if len(argv) >= 2 and argv[0] == 'names':
        for name in sorted({s.name for s in scrape(argv[1])}):
            print(name)
        return 0
    if len(argv) >= 4 and argv[0] == 'peak' and '--' in argv:
        return peak(argv[1:])
    if len(argv) < 4 or argv[0] != 'sum' or '--' not in argv:
        sys.exit(__doc__)
    sep = argv.index('--')
    name, want = argv[1], dict(a.split('=', 1) for a in argv[2:sep])
    total = sum(value(scrape(url), name, **want) for url in argv[sep + 1:])
    print(int(total) if total == int(total) else total)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
