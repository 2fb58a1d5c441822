"""The spread between machines of one GPU kind, from the repository's repeat sittings (lib/results/machine_spread.py):
configurations paired by fingerprint across report folders of one GPU model, the widest range of their sittings'
medians, and a ratio between GPUs judged against it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from lib.core.paths import ROOT
from lib.core.record import SCHEMA_VERSION
from lib.results import machine_spread as ms


def rec(fp: str, tps: float, stage: str = "compile", batch: int = 64, **kw) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "ok",
        "stage": stage,
        "batch_size": batch,
        "fingerprint": fp,
        "tokens_per_s": tps,
        "cv": 0.01,
        **kw,
    }


def test_a_configuration_in_two_sittings_pairs_by_fingerprint_and_the_widest_range_is_the_spread():
    s = ms.spread(
        {
            "a": [rec("f1", 100.0), rec("f2", 200.0, stage="vocab"), rec("only-a", 50.0)],
            "b": [rec("f1", 102.0), rec("f2", 200.0, stage="vocab")],
            "c": [rec("f1", 98.0), rec("only-c", 70.0)],
        }
    )
    assert s["configurations"] == 2 and s["paired"] == ["a", "b", "c"]
    assert s["spread"] == pytest.approx((102 - 98) / 100) and s["widest"]["stage"] == "compile"
    assert s["widest"]["medians"] == {"a": 100.0, "b": 102.0, "c": 98.0}
    assert [r["spread"] for r in s["rows"]] == sorted((r["spread"] for r in s["rows"]), reverse=True)
    # the same configuration twice as fast everywhere is no spread at all: a ratio of sittings, not of levels
    assert ms.spread({"a": [rec("f", 1.0)], "b": [rec("f", 1.0)]})["spread"] == 0.0


def test_a_sittings_processes_of_one_configuration_count_once_by_their_median():
    """A matrix record and its repeats ('-repeat-r1'), and the recipe's processes ('-r0', '-r1' inside the
    fingerprint), are one configuration in one sitting: its median over them is what pairs."""
    a = [
        rec("f1", 100.0),
        rec("f1-repeat-r1", 110.0, variant="repeat"),
        rec("f1-repeat-r2", 104.0, variant="repeat"),
        rec("g-recipe: recommended-accum8-r0-c0de", 300.0, variant="recipe: recommended", micro_steps=8),
        rec("g-recipe: recommended-accum8-r1-c0de", 306.0, variant="recipe: recommended", micro_steps=8),
    ]
    b = [rec("f1", 104.0), rec("g-recipe: recommended-accum8-r0-c0de", 303.0, variant="recipe: recommended")]
    s = ms.spread({"a": a, "b": b})
    rows = {(r["stage"], r["variant"]): r for r in s["rows"]}
    assert s["configurations"] == 2
    assert rows[("compile", None)]["spread"] == 0.0  # median of 100, 110, 104 against 104
    assert rows[("compile", "recipe: recommended")]["medians"] == {"a": 303.0, "b": 303.0}
    assert rows[("compile", "recipe: recommended")]["micro_steps"] == 8


def test_an_unsteady_process_is_left_out_and_counted():
    """An H100's cold FP8 process at B=16 ran 10 % slow at a 7.4 % coefficient of variation; alone it set a 9.7 %
    spread over eight sittings whose steady processes agreed."""
    slow = rec("f1", 90.0, cv=ms.UNSTEADY_CV * 1.5)
    s = ms.spread({"a": [slow, rec("f1-repeat-r1", 100.0)], "b": [rec("f1", 100.5)], "c": [slow]})
    assert (
        s["unsteady"] == 2
        and s["spread"] == pytest.approx(0.5 / 100.25)
        and s["rows"][0]["medians"].keys()
        == {
            "a",
            "b",
        }
    )


def test_parity_runs_multi_gpu_jobs_failures_and_unfingerprinted_records_are_no_timings():
    assert ms.timing(rec("f", 1.0))
    for other in (
        rec("f", 1.0, kind="parity"),
        rec("f", 1.0, stage="ddp"),
        rec("f", 1.0, status="oom"),
        rec("f", 1.0, stage="no such stage"),
        rec("", 1.0),
        rec("f", 1.0, schema_version=SCHEMA_VERSION + 1),
        {**rec("f", 1.0), "tokens_per_s": None},
    ):
        assert not ms.timing(other), other


def test_without_a_configuration_in_two_sittings_the_spread_is_not_measured():
    s = ms.spread({"a": [rec("f1", 100.0)], "b": [rec("f2", 100.0)]})
    assert s["spread"] is None and s["configurations"] == 0 and s["paired"] == [] and s["sittings"] == ["a", "b"]
    assert ms.spread({"a": [rec("f1", 100.0)]})["spread"] is None


def _folder(root: Path, name: str, device: str, records: list[dict]) -> None:
    d = root / name
    (d / "results" / "repeats").mkdir(parents=True)
    (d / "params.json").write_text("{}")
    (d / "environment.json").write_text(json.dumps({"device": {"name": device}}))
    for i, r in enumerate(records):
        (d / "results" / ("repeats" if "repeat" in r["fingerprint"] else "") / f"r{i}.json").write_text(json.dumps(r))


def test_the_sittings_of_a_gpu_model_are_its_report_folders_and_their_archive(tmp_path):
    _folder(tmp_path, "h200", "H200", [rec("f1", 100.0), rec("f1-repeat-r1", 102.0)])
    _folder(tmp_path, "h200-x2", "H200", [rec("f1", 103.0)])
    _folder(tmp_path, "archive/h200-20260101-000000", "H200", [rec("f1", 99.0)])
    _folder(tmp_path, "h100", "H100", [rec("f1", 80.0)])  # another GPU model: not a sitting of the H200
    (tmp_path / "compare-h100-h200").mkdir()  # no params.json: not a report
    (tmp_path / "h200" / "results" / "parity").mkdir()
    (tmp_path / "h200" / "results" / "parity" / "p.json").write_text(json.dumps(rec("f1", 1.0, kind="parity")))
    s = ms.of_device(tmp_path, "H200")
    assert s["device"] == "H200" and s["sittings"] == ["archive/h200-20260101-000000", "h200", "h200-x2"]
    assert s["widest"]["medians"] == {"archive/h200-20260101-000000": 99.0, "h200": 101.0, "h200-x2": 103.0}
    assert s["machines"] == ["unrecorded"]  # records made before they were stamped
    assert (
        ms.of_device(tmp_path, "H100")["spread"] is None and ms.of_device(tmp_path / "none", "H200")["sittings"] == []
    )


@pytest.mark.parametrize(
    "ratio, spreads, floor, within, basis",
    [
        (1.03, [0.02, 0.04], 0.01, True, "machines"),  # inside the two kinds' spreads combined (4.5 %)
        (1.044, [0.02, 0.04], 0.01, True, "machines"),  # beyond the wider kind's alone, inside both combined
        (1.05, [0.02, 0.04], 0.01, False, "machines"),
        (1.05, [0.02, 0.01], 0.06, True, "machines"),  # the process-to-process spread, wider here, counts too
        (1.05, [0.02, None], 0.01, False, "processes"),  # one kind unmeasured: nothing stronger than what is
        (1.01, [None, None], 0.02, True, "processes"),
        (1.01, [None, None], None, None, None),
        (None, [0.02, 0.02], 0.01, None, "machines"),
    ],
)
def test_a_ratio_is_judged_against_both_kinds_spreads_combined_and_names_the_kinds_left_unmeasured(
    ratio, spreads, floor, within, basis
):
    kinds = [{"device": f"GPU {i}", "spread": s} for i, s in enumerate(spreads)]
    j = ms.judge(ratio, kinds, floor)
    assert (j["within"], j["basis"]) == (within, basis)
    assert j["unmeasured"] == [k["device"] for k in kinds if k["spread"] is None]
    measured = [x for x in spreads if x is not None]
    combined = [math.sqrt(sum(x * x for x in measured))] if measured else []
    parts = combined + ([floor] if floor is not None else [])
    assert j["band"] == (pytest.approx(max(parts)) if parts else None)


def test_two_reports_of_one_kind_are_judged_against_that_kind_s_spread_alone():
    one = {"device": "H100", "spread": 0.027}
    assert ms.judge(1.03, [one, dict(one)], 0.01)["band"] == pytest.approx(0.027)


def test_the_repositorys_own_h200_sittings_measure_their_spread():
    """reports/h200 and the earlier H200 sitting archived beside it (same GPU model, software and driver) time the
    same configurations: the spread is measured from them, and each figure recomputes from their records."""
    root = ROOT / "reports"
    device = json.loads((root / "h200" / "environment.json").read_text())["device"]["name"]
    s = ms.of_device(root, device)
    assert {"h200", "archive/h200-20261126-100121"} <= set(s["paired"]) and "h100" not in s["sittings"]
    assert s["configurations"] >= 10 and s["spread"] == max(r["spread"] for r in s["rows"]) > 0
    w = s["widest"]
    for name, median in w["medians"].items():
        timed = [
            r["tokens_per_s"]
            for r in ms.read_sitting(root / name)
            if (r["stage"], r["batch_size"], r.get("micro_steps")) == (w["stage"], w["batch"], w["micro_steps"])
            and (None if r.get("variant") == "repeat" else r.get("variant")) == w["variant"]
            and (r.get("cv") or 0) <= ms.UNSTEADY_CV
        ]
        assert median == pytest.approx(float(np.median(timed)))
