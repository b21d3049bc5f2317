#!/usr/bin/env python3
# perf script -F pid,ip,sym | perfagg.py PID [N]  -> flat and cumulative shares of one process
import sys, collections, re
pid = sys.argv[1]; N = int(sys.argv[2]) if len(sys.argv) > 2 else 40
flat = collections.Counter(); cum = collections.Counter(); total = 0
cur = None; stack = []
def done():
    global total
    if cur == pid and stack:
        total += 1
        flat[stack[0]] += 1
        for f in set(stack): cum[f] += 1
for line in sys.stdin:
    if not line.strip():
        done(); cur = None; stack = []; continue
    if not line.startswith('\t') and not line.startswith('        '):
        done(); cur = line.split()[0]; stack = []; continue
    parts = line.strip().split(None, 1)
    sym = parts[1] if len(parts) > 1 else parts[0]
    sym = re.sub(r'\[go\.shape[^\]]*\]', '[...]', sym)
    stack.append(sym)
done()
print("samples", total)
print("== flat")
for f, c in flat.most_common(N): print(f"{100*c/total:6.2f}% {f}")
print("== cum")
for f, c in cum.most_common(N*2): print(f"{100*c/total:6.2f}% {f}")
