"""The long quality test (lib/run/long_test.py) run end to end on the CPU default, on a small long corpus made here
from the report's own text: both sides of each seed from the same weights and data order, the held-out curve along
each run, and a verdict that recomputes from the records. The GPU runs the same command on the real corpus."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, describe_proc

from lib.core import data


def _data_with_long_corpus(tmp_path, train_tokens=30_000, held_tokens=6_000):
    """A data folder: the report's files, and data/long/ as `make corpus-long` lays it out (its manifest's hashes)."""
    d = tmp_path / "data"
    (d / "long").mkdir(parents=True)
    for name in ("tokens.npy", "gpt2.tiktoken", "manifest.json", "corpus.txt"):
        if (data.DATA_DIR / name).exists():
            shutil.copy(data.DATA_DIR / name, d / name)
    tokens = np.load(data.DATA_DIR / "tokens.npy")
    files, arrays = {}, {}
    for name, part in (("train.npy.xz", tokens[:train_tokens]), ("held_out.npy.xz", tokens[-held_tokens:])):
        part = np.ascontiguousarray(part.astype(np.uint16))
        buf = io.BytesIO()
        np.save(buf, part)
        raw = lzma.compress(buf.getvalue())
        (d / "long" / name).write_bytes(raw)
        files[name], arrays[name.split(".")[0]] = hashlib.sha256(raw).hexdigest(), hashlib.sha256(part).hexdigest()
    (d / "long" / "manifest.json").write_text(json.dumps({"files_sha256": files, "tokens_sha256": arrays}))
    return d


def _long_test(data_dir, *args, timeout=600):
    env = {**os.environ, "GPT2_LEVERS_DATA": str(data_dir), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "lib.run.long_test", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_long_test_pairs_seeds_on_the_long_corpus_and_judges_in_time_to_the_same_loss(tmp_path):
    d, out = _data_with_long_corpus(tmp_path), tmp_path / "long"
    args = ["cpu", "vocab", "--against", "flash", "--batch", "2", "--seeds", "2", "--min-steps", "8"]
    proc = _long_test(d, *args, "--speedup", "1.05", "--speed-noise", "0.01", "--folder", str(out))
    assert proc.returncode == 0, describe_proc(proc)
    recs = [json.loads(p.read_text()) for p in sorted((out / "results" / "long").glob("*.json"))]
    assert len(recs) == 4 and {r["corpus"] for r in recs} == {"long"}
    by = {(r["stage"], r["seed_offset"]): r for r in recs}
    for seed in (0, 1):  # each seed: both sides from the same weights, on the same text
        lever, ref = by[("vocab", seed)], by[("flash", seed)]
        assert lever["data_start"] == ref["data_start"] and lever["steps"] == ref["steps"]
        assert len(ref["held_out_curve"]) == 10 and ref["held_out_curve"][-1] == [ref["steps"], ref["held_out_loss"]]
    assert by[("flash", 0)]["data_start"] != by[("flash", 1)]["data_start"]
    assert 3.9 < recs[0]["passes"] <= 4.0  # the horizon rule: at most four passes over the training text
    v = json.loads((out / "long-vocab-vs-flash.json").read_text())["verdict"]
    diffs = [by[("vocab", s)]["held_out_loss"] - by[("flash", s)]["held_out_loss"] for s in (0, 1)]
    assert v["diffs"] == pytest.approx(diffs) and v["mean_diff"] == pytest.approx(np.mean(diffs))
    assert v["decision"] in ("adopt", "skip", "not yet") and f"{v['horizon_step']:g} steps" in v["covers"]
    assert len(v["spread"]) == 10  # the paired spread at every point of the curve, not at the horizon alone
    # a rerun keeps what was measured and adds only the new seeds
    again = _long_test(d, *args[:7], "3", "--min-steps", "8", "--folder", str(out))
    assert again.returncode == 0, describe_proc(again)
    assert len(list((out / "results" / "long").glob("*.json"))) == 6
    assert by[("flash", 0)] == json.loads((out / "results" / "long" / "flash__b2__s0.json").read_text())


def test_the_long_test_refuses_in_one_line_without_its_corpus_or_with_a_corpus_too_small(tmp_path):
    d = _data_with_long_corpus(tmp_path)
    shutil.rmtree(d / "long")
    proc = _long_test(
        d, "cpu", "vocab", "--against", "flash", "--batch", "2", "--seeds", "2", "--folder", str(tmp_path)
    )
    assert proc.returncode == 2 and "make corpus-long" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    small = _data_with_long_corpus(tmp_path / "small", train_tokens=2_000)
    proc = _long_test(small, "cpu", "vocab", "--against", "flash", "--batch", "2", "--seeds", "2")
    assert proc.returncode == 2 and "early transient" in proc.stderr


def test_the_long_test_runs_nothing_where_a_side_cannot_run(tmp_path):
    """A four-H200 host whose setup had missed torchao ran the loss-only forward's seeds and wrote the FP8 lm_head's
    as not applicable: the test now stops before any run and says which side cannot run here."""
    d, out = _data_with_long_corpus(tmp_path), tmp_path / "long"
    args = ["cpu", "fp8_head", "--batch", "2", "--seeds", "2", "--min-steps", "8", "--folder", str(out)]
    proc = _long_test(d, *args)
    assert proc.returncode == 2 and "nothing was run" in proc.stderr, describe_proc(proc)
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not list(out.glob("results/long/*.json"))


def test_the_long_test_runs_nothing_on_a_machine_that_is_not_its_profile_s(tmp_path):
    """A call for an H200 ran `long_test h200` on an H100: its runs paired nothing of the H200's, and the folder's H200
    runs were set aside as another machine's. Here the H100 profile on this CPU is refused before any run, in one
    line, and the folder keeps what it had."""
    d, out = _data_with_long_corpus(tmp_path), tmp_path / "long"
    proc = _long_test(d, "h100", "tf32", "--batch", "2", "--seeds", "1", "--min-steps", "8", "--folder", str(out))
    assert proc.returncode == 2 and "is not this machine's" in proc.stderr and "nothing was run" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, describe_proc(proc)
    assert not list(out.glob("results/long/*.json")) and not (out / "environment.json").exists()
