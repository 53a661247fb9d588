#!/usr/bin/env python3
"""The include graph of the project's C and CUDA sources against the layers of docs/architecture.md:

    core < kernels < model < queue < weights < rollout < reward < trainer < scheduler < cli

Reports, and exits 1 for: an include of a folder above the includer's (or of a folder missing from the order),
folders that include each other through any chain (a loop of folders, however long), and files that include each
other through any chain (a circle; x.c, x.h and x.cu count as one file). argv: [project root] [--allow-circle A,B,..]
(a circle of exactly those files, while their rewrite is under way)."""
import os
import re
import sys

ORDER = ["core", "kernels", "model", "queue", "weights", "rollout", "reward", "trainer", "scheduler", "cli"]
RANK = {f: i for i, f in enumerate(ORDER)}
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".def")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root):
    out = []
    for top in ORDER:
        for d, _, names in os.walk(os.path.join(root, top)):
            out += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(SOURCE_EXT)]
    return sorted(out)


def graph(root, files):
    known, edges = set(files), {}
    for f in files:
        unit = os.path.splitext(f)[0]
        edges.setdefault(unit, set())
        with open(os.path.join(root, f), errors="replace") as fh:
            text = fh.read()
        for name in INCLUDE.findall(text):
            for cand in (os.path.normpath(os.path.join(os.path.dirname(f), name)), os.path.normpath(name)):
                if cand in known:
                    target = os.path.splitext(cand)[0]
                    if target != unit:
                        edges[unit].add(target)
                    break
    return edges


def cycles(edges):
    """Strongly connected components with more than one node (iterative Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main(argv):
    root, allowed = ".", []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--allow-circle":
            allowed.append(sorted(args.pop(0).split(",")))
        else:
            root = a
    edges = graph(root, sources(root))
    folder = lambda u: u.split(os.sep)[0]
    problems = []
    folder_edges = {}
    for u in sorted(edges):
        for v in sorted(edges[u]):
            a, b = folder(u), folder(v)
            if a == b:
                continue
            folder_edges.setdefault(a, set()).add(b)
            if RANK[b] > RANK[a]:
                problems.append(f"upward include: {u} -> {v} ({a} is below {b})")
    for loop in cycles(folder_edges):
        problems.append("folder loop: " + " <-> ".join(loop))
    for circle in cycles(edges):
        if circle not in allowed:
            problems.append("circle: " + " <-> ".join(circle))
    for p in problems:
        print(p)
    print(f"check_layers: {len(edges)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
