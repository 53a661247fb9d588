#!/usr/bin/env python3
"""Training-reward curves of cpt against TRL, tenth by tenth over the steps both ran (issue 22: cpt within the
seed-to-seed spread of TRL's curve), from the folder bench/rl_learning.sh writes.

    rl_curve_check.py OUT [--md FILE]

Reads OUT/runs/NAME/metrics.jsonl for cpt's runs (lr-sN: the recipe at seed N; shuf-sN: the same with
train.mini_batch_shuffle; lr0-sN: learning rate 0 at seed N) and OUT/trl-sN/metrics.jsonl for TRL's. Prints (and
with --md appends to FILE) a markdown section:
- per tenth of the common steps: TRL's seed range and mean, cpt's (each arm), and whether cpt's seed mean lies
  inside TRL's range;
- the prompts controlled for: a step's reward depends on how hard its 16 prompts are, and cpt's seed N draws the
  same prompts at lr 0 as at the recipe's lr, so lr-sN minus lr0-sN, tenth by tenth, is what training added on those
  prompts. TRL draws other prompts: its tenths are set against the start policy's mean sampled reward over every
  lr-0 step, with the spread of a tenth-long block of lr-0 steps (how much prompts alone move a tenth).
Exit 0 whatever the verdict (a report, not a test); 2 when OUT holds no TRL run or no cpt run."""
import json
import os
import statistics as st
import sys


def rewards(path):
    """{step: reward/mean} of one metrics.jsonl (steps >= 1)."""
    r = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                d = json.loads(line)
                if "reward/mean" in d and d.get("step", 0) >= 1:
                    r[int(d["step"])] = float(d["reward/mean"])
    except (OSError, ValueError):
        return {}
    return r


def runs_of(out):
    """{arm: {seed: {step: reward}}} for the arms lr, shuf, lr0 and trl."""
    arms = {"lr": {}, "shuf": {}, "lr0": {}, "trl": {}}
    rdir = os.path.join(out, "runs")
    for name in sorted(os.listdir(rdir)) if os.path.isdir(rdir) else []:
        for arm in ("lr0", "lr", "shuf"):
            pre = arm + "-s"
            if name.startswith(pre) and name[len(pre):].isdigit():
                r = rewards(os.path.join(rdir, name, "metrics.jsonl"))
                if r:
                    arms[arm][int(name[len(pre):])] = r
                break
    for name in sorted(os.listdir(out)) if os.path.isdir(out) else []:
        if name.startswith("trl-s") and name[5:].isdigit():
            r = rewards(os.path.join(out, name, "metrics.jsonl"))
            if r:
                arms["trl"][int(name[5:])] = r
    return arms


def tenths(n):
    """Ten bins of steps 1..n (inclusive ranges); fewer when n < 10."""
    k = min(10, n)
    edges = [1 + (n * i) // k for i in range(k + 1)]
    return [(edges[i], edges[i + 1] - 1) for i in range(k)]


def mean_over(r, lo, hi):
    v = [r[s] for s in range(lo, hi + 1) if s in r]
    return sum(v) / len(v) if v else None


def fmt(x, sign=False):
    return "-" if x is None else (f"{x:+.3f}" if sign else f"{x:.3f}")


def span(vals):
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    return f"{st.mean(v):.3f} [{min(v):.3f}, {max(v):.3f}]" if len(v) > 1 else f"{v[0]:.3f}"


def report(out):
    arms = runs_of(out)
    trl = arms["trl"]
    cpt_arms = [a for a in ("lr", "shuf") if arms[a]]
    if not trl or not cpt_arms:
        return None
    n = min(max(r) for a in ["trl"] + cpt_arms for r in arms[a].values())
    bins = tenths(n)
    md = ["", f"## Training reward, cpt against TRL, over steps 1-{n} (bench/rl_curve_check.py)", "",
          "Per tenth of the steps: the seeds' mean [min, max] of reward/mean; 'inside' says whether cpt's seed mean "
          "lies inside TRL's seed range.", "",
          "| steps | TRL (" + ", ".join(f"s{s}" for s in sorted(trl)) + ") | "
          + " | ".join(f"cpt {a} (" + ", ".join(f"s{s}" for s in sorted(arms[a])) + ") | inside" for a in cpt_arms)
          + (" | lr 0 |" if arms["lr0"] else " |"),
          "| --- | --- | " + " | ".join("--- | ---" for _ in cpt_arms) + (" | --- |" if arms["lr0"] else " |")]
    inside = {a: 0 for a in cpt_arms}
    for lo, hi in bins:
        t = [mean_over(r, lo, hi) for r in trl.values()]
        t = [x for x in t if x is not None]
        row = f"| {lo}-{hi} | {span(t)} | "
        cells = []
        for a in cpt_arms:
            c = [mean_over(r, lo, hi) for r in arms[a].values()]
            c = [x for x in c if x is not None]
            ok = bool(t and c and min(t) <= st.mean(c) <= max(t))
            inside[a] += ok
            cells.append(f"{span(c)} | {'yes' if ok else 'no'}")
        row += " | ".join(cells)
        if arms["lr0"]:
            row += f" | {span([mean_over(r, lo, hi) for r in arms['lr0'].values()])}"
        md.append(row + " |")
    md.append("")
    md.append("cpt's seed mean inside TRL's seed range: "
              + "; ".join(f"{a} {inside[a]} of {len(bins)} tenths" for a in cpt_arms) + ".")
    if arms["lr0"]:
        lr0_steps = [v for r in arms["lr0"].values() for s, v in sorted(r.items())]
        base = st.mean(lr0_steps)
        width = max(1, n // len(bins))
        blocks = [st.mean(list(r[s] for s in range(b, b + width) if s in r))
                  for r in arms["lr0"].values() for b in range(1, max(r) - width + 2, width)
                  if any(s in r for s in range(b, b + width))]
        noise = st.stdev(blocks) if len(blocks) > 1 else None
        md += ["", f"The prompts controlled for: the start policy's mean sampled reward over every lr-0 step is "
               f"{base:.3f} ({len(lr0_steps)} steps; a {width}-step block of lr-0 steps has sd {fmt(noise)}: what "
               f"the prompts alone move a tenth). Gain per tenth: cpt's seed N minus lr 0 at seed N (the same "
               f"prompts); TRL's seed minus {base:.3f}.", "",
               "| steps | TRL gain | " + " | ".join(f"cpt {a} gain over lr 0" for a in cpt_arms) + " |",
               "| --- | --- | " + " | ".join("---" for _ in cpt_arms) + " |"]
        for lo, hi in bins:
            tg = [mean_over(r, lo, hi) - base for r in trl.values() if mean_over(r, lo, hi) is not None]
            cells = []
            for a in cpt_arms:
                g = [mean_over(r, lo, hi) - mean_over(arms["lr0"][s], lo, hi) for s, r in arms[a].items()
                     if s in arms["lr0"] and mean_over(r, lo, hi) is not None
                     and mean_over(arms["lr0"][s], lo, hi) is not None]
                cells.append(span_signed(g))
            md.append(f"| {lo}-{hi} | {span_signed(tg)} | " + " | ".join(cells) + " |")
    return "\n".join(md) + "\n"


def span_signed(vals):
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{vals[0]:+.3f}"
    return f"{st.mean(vals):+.3f} [{min(vals):+.3f}, {max(vals):+.3f}]"


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--md"):
        print("usage: rl_curve_check.py OUT [--md FILE]", file=sys.stderr)
        return 2
    text = report(argv[1])
    if text is None:
        print(f"rl_curve_check: {argv[1]}: no TRL run (trl-sN/metrics.jsonl) or no cpt run "
              "(runs/lr-sN or runs/shuf-sN/metrics.jsonl) to compare", file=sys.stderr)
        return 2
    print(text, end="")
    if len(argv) == 4:
        with open(argv[3], "a") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
