#!/usr/bin/env python3
"""Not a test: an independent reader of cpt's TensorBoard event files (core/tfevents.h), used by the e2e tests.

  python3 tests/e2e/tfevents_read.py RUN_DIR

reads every RUN_DIR/tensorboard/events.out.tfevents.* in name order: the TFRecord framing (uint64 length, masked
CRC32C of it, data, masked CRC32C of the data; both CRCs checked), then each record as a tensorflow.Event protobuf
(wall_time = 1 double, step = 2 int64, file_version = 3 string, summary = 5: Summary.value = 1 repeated, each with
tag = 1 string and simple_value = 2 float; session_log = 7: status = 1), decoded by hand here. It checks that each
file starts with file_version "brain.Event:2" and a session_log START, and that the scalars are those of
RUN_DIR/metrics.jsonl: the same (step, key) pairs (every numeric key of every line; a START at step s drops what
earlier files hold at steps >= s, as TensorBoard does, and a resumed attempt's metrics.jsonl does), each value equal
to the line's as a float32, and each event's wall_time the line's "time". Prints a summary; exits 1 naming the
first difference."""
import glob, json, math, os, struct, sys


def crc32c(data):
    table = crc32c.table
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


crc32c.table = _table()


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    b = open(path, "rb").read()
    at = 0
    while at < len(b):
        if len(b) - at < 12:
            raise SystemExit(f"{path}: {len(b) - at} bytes of a torn record header at offset {at}")
        head = b[at:at + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", b[at + 8:at + 12])
        if hc != masked(head):
            raise SystemExit(f"{path}: length CRC mismatch at offset {at}")
        data = b[at + 12:at + 12 + n]
        if len(data) != n or len(b) < at + 16 + n:
            raise SystemExit(f"{path}: record at offset {at} cut short")
        (dc,) = struct.unpack("<I", b[at + 12 + n:at + 16 + n])
        if dc != masked(data):
            raise SystemExit(f"{path}: data CRC mismatch in the record at offset {at}")
        yield data
        at += 16 + n


def varint(b, at):
    v, shift = 0, 0
    while True:
        x = b[at]
        at += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, at


def fields(b):
    """(field number, wire type, value) of a protobuf message: ints for varints, bytes for the rest."""
    at = 0
    while at < len(b):
        key, at = varint(b, at)
        f, w = key >> 3, key & 7
        if w == 0:
            v, at = varint(b, at)
        elif w == 1:
            v, at = b[at:at + 8], at + 8
        elif w == 2:
            n, at = varint(b, at)
            v, at = b[at:at + n], at + n
        elif w == 5:
            v, at = b[at:at + 4], at + 4
        else:
            raise SystemExit(f"wire type {w} of field {f}: not expected in an Event")
        yield f, w, v


def event(data):
    e = {"wall_time": None, "step": 0, "file_version": None, "start": False, "scalars": {}}
    for f, w, v in fields(data):
        if f == 1 and w == 1:
            e["wall_time"] = struct.unpack("<d", v)[0]
        elif f == 2 and w == 0:
            e["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif f == 3 and w == 2:
            e["file_version"] = v.decode()
        elif f == 5 and w == 2:
            for sf, sw, sv in fields(v):
                if sf != 1 or sw != 2:
                    raise SystemExit(f"Summary field {sf}: not a value")
                tag, val = None, None
                for vf, vw, vv in fields(sv):
                    if vf == 1 and vw == 2:
                        tag = vv.decode()
                    elif vf == 2 and vw == 5:
                        val = struct.unpack("<f", vv)[0]
                if tag is None or val is None:
                    raise SystemExit(f"a Summary.Value without tag or simple_value: {sv!r}")
                e["scalars"][tag] = val
        elif f == 7 and w == 2:
            e["start"] = any(sf == 1 and sw == 0 and sv == 1 for sf, sw, sv in fields(v))
        else:
            raise SystemExit(f"unexpected Event field {f} (wire type {w})")
    return e


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main(run_dir):
    files = sorted(glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*")))
    if not files:
        raise SystemExit(f"no event file in {run_dir}/tensorboard")
    got, times, n_events = {}, {}, 0
    for path in files:
        evs = [event(r) for r in records(path)]
        if not evs or evs[0]["file_version"] != "brain.Event:2":
            raise SystemExit(f"{path}: the first event is not file_version brain.Event:2: {evs[:1]}")
        if len(evs) < 2 or not evs[1]["start"]:
            raise SystemExit(f"{path}: the second event is not a session_log START: {evs[1:2]}")
        purge = evs[1]["step"]
        got = {k: v for k, v in got.items() if k[0] < purge}
        for e in evs[2:]:
            n_events += 1
            for tag, v in e["scalars"].items():
                got[(e["step"], tag)] = v
                times[(e["step"], tag)] = e["wall_time"]
    want, wtimes = {}, {}
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        for k, v in r.items():
            if k in ("step", "time") or isinstance(v, str):
                continue
            want[(r["step"], k)] = math.nan if v is None else float(v)
            wtimes[(r["step"], k)] = r["time"]
    if set(got) != set(want):
        extra, missing = sorted(set(got) - set(want))[:5], sorted(set(want) - set(got))[:5]
        raise SystemExit(f"event scalars differ from metrics.jsonl: only in events {extra}, only in the JSONL {missing}")
    for k, v in want.items():
        g = got[k]
        if not (math.isnan(v) and math.isnan(g)) and g != f32(v):
            raise SystemExit(f"step {k[0]} {k[1]}: event {g!r}, metrics.jsonl {v!r} (as float32 {f32(v)!r})")
        if abs(times[k] - wtimes[k]) > 1e-6:
            raise SystemExit(f"step {k[0]} {k[1]}: wall_time {times[k]} but the line's time {wtimes[k]}")
    steps = sorted({s for s, _ in want})
    tags = sorted({t for _, t in want})
    print(f"tfevents: {len(files)} file(s), {n_events} events, {len(want)} scalars = metrics.jsonl "
          f"(steps {steps[0]}..{steps[-1]}, {len(tags)} tags, CRCs checked)")


if __name__ == "__main__":
    main(sys.argv[1])
