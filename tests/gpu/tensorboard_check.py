#!/usr/bin/env python3
"""cpt's TensorBoard event files read by TensorBoard's own reader (not a ctest test: it needs the tensorboard
package, which the GPU machine's image has and the CPU machines lack).

  here:            TB_OUT=.carry-tb bash tests/e2e/test_tensorboard.sh   (keeps its SFT, DPO and GRPO runs' metrics.jsonl
                                                                        and tensorboard/ folders in .carry-tb)
  on the GPU host: python3 tests/gpu/tensorboard_check.py .carry-tb/*    (the device tool with carry [".carry-tb"])

For each RUN_DIR, TensorBoard's two readers load RUN_DIR/tensorboard (every event file in it, with their purge of
the steps a resumed run logged again): event_accumulator.EventAccumulator (Scalars) and the
plugin_event_accumulator.EventAccumulator behind `tensorboard --logdir` (simple_value migrated to scalar tensors,
Tensors). Every scalar (tag, step) is compared with RUN_DIR/metrics.jsonl: the same pairs, each once, values equal
as float32, wall times the lines' "time". Prints one line per run and reader; exits 1 at the first difference."""
import json, math, os, struct, sys

from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
from tensorboard.util import tensor_util


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def legacy(run_dir):
    ea = event_accumulator.EventAccumulator(os.path.join(run_dir, "tensorboard"),
                                            size_guidance={event_accumulator.SCALARS: 0})
    ea.Reload()
    return [(tag, ev.step, ev.value, ev.wall_time) for tag in ea.Tags()["scalars"] for ev in ea.Scalars(tag)]


def server(run_dir):
    ea = plugin_event_accumulator.EventAccumulator(os.path.join(run_dir, "tensorboard"),
                                                   size_guidance={plugin_event_accumulator.TENSORS: 0})
    ea.Reload()
    return [(tag, ev.step, float(tensor_util.make_ndarray(ev.tensor_proto)), ev.wall_time)
            for tag in ea.Tags()["tensors"] for ev in ea.Tensors(tag)]


def check(run_dir, reader):
    got = {}
    for tag, step, value, wall_time in reader(run_dir):
        if (step, tag) in got:
            raise SystemExit(f"{run_dir}: step {step} {tag} twice in TensorBoard's view ({reader.__name__})")
        got[(step, tag)] = (value, wall_time)
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
        raise SystemExit(f"{run_dir}: TensorBoard's scalars ({reader.__name__}) differ from metrics.jsonl: only in "
                         f"TensorBoard {sorted(set(got) - set(want))[:5]}, only in the JSONL "
                         f"{sorted(set(want) - set(got))[:5]}")
    for k, (v, t) in want.items():
        g, gt = got[k]
        if not (math.isnan(v) and math.isnan(g)) and g != f32(v):
            raise SystemExit(f"{run_dir}: step {k[0]} {k[1]}: TensorBoard {g!r}, metrics.jsonl {v!r}")
        if abs(gt - t) > 1e-6:
            raise SystemExit(f"{run_dir}: step {k[0]} {k[1]}: wall_time {gt} but the line's time {t}")
    steps = sorted({s for s, _ in want})
    print(f"tensorboard_check: {run_dir}: {len(want)} scalars, {len({t for _, t in want})} tags, steps "
          f"{steps[0]}..{steps[-1]}: equal to metrics.jsonl (" +
          ("event_accumulator Scalars)" if reader is legacy else "plugin_event_accumulator Tensors, as tensorboard --logdir)"))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for d in sys.argv[1:]:
        check(d, legacy)
        check(d, server)
    print("tensorboard_check: ok")
