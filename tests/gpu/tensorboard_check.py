#!/usr/bin/env python3
"""cpt's TensorBoard event files read by TensorBoard's own reader (not a ctest test: it needs the tensorboard
package, which the GPU machine's image has and the CPU machines lack).

  here:            TB_OUT=.carry-tb bash tests/e2e/test_tensorboard.sh   (keeps its SFT, DPO and GRPO runs' metrics.jsonl
                                                                        and tensorboard/ folders in .carry-tb)
  on the GPU host: python3 tests/gpu/tensorboard_check.py .carry-tb/*    (the device tool with carry [".carry-tb"])

For each RUN_DIR, tensorboard.backend.event_processing.event_accumulator.EventAccumulator loads RUN_DIR/tensorboard
(every event file in it, as `tensorboard --logdir` does, with its purge of steps a resumed run logged again) and
every scalar (tag, step) is compared with RUN_DIR/metrics.jsonl: the same pairs, values equal as float32, wall
times the lines' "time". Prints one line per run and exits 1 at the first difference."""
import json, math, os, struct, sys

from tensorboard.backend.event_processing import event_accumulator


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(run_dir):
    ea = event_accumulator.EventAccumulator(os.path.join(run_dir, "tensorboard"),
                                            size_guidance={event_accumulator.SCALARS: 0})
    ea.Reload()
    got = {}
    for tag in ea.Tags()["scalars"]:
        for ev in ea.Scalars(tag):
            if (ev.step, tag) in got:
                raise SystemExit(f"{run_dir}: step {ev.step} {tag} twice in TensorBoard's view")
            got[(ev.step, tag)] = (ev.value, ev.wall_time)
    want = {}
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        for k, v in r.items():
            if k in ("step", "time") or isinstance(v, str):
                continue
            want[(r["step"], k)] = (math.nan if v is None else float(v), r["time"])
    if set(got) != set(want):
        raise SystemExit(f"{run_dir}: TensorBoard's scalars differ from metrics.jsonl: only in TensorBoard "
                         f"{sorted(set(got) - set(want))[:5]}, only in the JSONL {sorted(set(want) - set(got))[:5]}")
    for k, (v, t) in want.items():
        g, gt = got[k]
        if not (math.isnan(v) and math.isnan(g)) and g != f32(v):
            raise SystemExit(f"{run_dir}: step {k[0]} {k[1]}: TensorBoard {g!r}, metrics.jsonl {v!r}")
        if abs(gt - t) > 1e-6:
            raise SystemExit(f"{run_dir}: step {k[0]} {k[1]}: wall_time {gt} but the line's time {t}")
    steps = sorted({s for s, _ in want})
    print(f"tensorboard_check: {run_dir}: {len(want)} scalars, {len(ea.Tags()['scalars'])} tags, steps "
          f"{steps[0]}..{steps[-1]}: equal to metrics.jsonl (TensorBoard's EventAccumulator)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for d in sys.argv[1:]:
        check(d)
    print("tensorboard_check: ok")
