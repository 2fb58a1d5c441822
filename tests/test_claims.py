"""Claims verdicts: computed from synthetic records alone, and they flip when the data flips."""

from __future__ import annotations

import html
import re

import pytest
import yaml
from conftest import make_record, tiny_params, write_report_dir

from lib.core import config, paths, record
from lib.report import claims_view, gemm_sweep_view, loader
from lib.results import claim_figures, claim_params, claims, decide, gemm_alignment, store

WORDS = (
    "confirmed",
    "confirmed (within noise)",
    "exceeded",
    "fell short",
    "contradicted",
    "undecided",
    "not applicable",
    "not measured",
)


def _df(times: dict, batch: int = 2, **columns):
    """The results table of one record per stage: {stage: ms per step, or None for an OOM row};
    `columns`: {record field: {stage: value}} set on the records (memory layers)."""
    params = tiny_params(list(times) or ["fp32"])
    recs = []
    for stage, ms in times.items():
        rec = (
            make_record(params, stage, batch, [ms] * 5, [3.0] * 6)
            if ms is not None
            else make_record(params, stage, batch, status="oom", reason="out of memory")
        )
        for field, by_stage in columns.items():
            rec[field] = by_stage.get(stage)
        recs.append(rec)
    return decide.table(recs, params.stages)


def _judge(claim, *args, **kw) -> dict:
    """One claim's row as lib/results/claims.py judges it, with its figures in the words the table shows them in."""
    row = claims.verdict(claim, *args, **kw)
    return {**row, "measured": claims_view.measured_text(row)}


def _claim(cid):
    return next(c for c in claim_params.load_claims()["claims"] if c["id"] == cid)


def _verdict(cid, df, profile="h100", gemm=None, noise=None):
    return _judge(_claim(cid), df, profile, "cuda", gemm, noise)


def test_every_claim_in_the_file_has_a_known_metric_an_expectation_and_families():
    data = claim_params.load_claims()
    assert len(data["claims"]) >= 8
    for c in data["claims"]:  # a loss-gate claim's expectation is the report's own loss tolerance
        assert c["metric"] in claim_params.METRICS and (c.get("expect") or c["metric"] == "loss_gate")
        assert c["families"] and set(c["families"]) <= set(config.FAMILIES)
        assert c["quote"] and c["cite"] and not c["cite"].isdigit()  # a source cited by what it is, never "[000]"


def test_the_verdict_words_and_their_colours():
    assert set(claims_view.CSS) == set(WORDS)
    assert {claims_view.CSS[w] for w in ("confirmed", "confirmed (within noise)", "exceeded")} == {"ok"}
    assert [
        claims_view.CSS[w] for w in ("fell short", "contradicted", "undecided", "not applicable", "not measured")
    ] == [
        "warn",
        "bad",
        "warn",
        "note",
        "warn",
    ]


@pytest.mark.parametrize(
    "tf32_ms, noise, expected",
    [
        (400.0, None, "confirmed"),  # 2.50x, inside 2.34-2.86x
        (300.0, None, "exceeded"),  # 3.33x: a bigger speed-up than claimed
        (600.0, None, "fell short"),  # 1.67x: faster, by less than claimed
        (1100.0, None, "contradicted"),  # 0.91x: a slow-down
        (435.0, 0.02, "confirmed (within noise)"),  # 2.30x: 1.8 % under the range, inside a 2 % noise
        (435.0, 0.01, "fell short"),  # ... but not inside a 1 % noise
    ],
)
def test_a_speedup_claim_gets_each_word_as_the_data_moves(tf32_ms, noise, expected):
    v = _verdict("tf32-speedup", _df({"fp32": 1000.0, "tf32": tf32_ms}), noise=noise)
    assert v["verdict"] == v["figure"]["word"] == expected
    assert v["figure"]["value"] == pytest.approx(1000.0 / tf32_ms)


@pytest.mark.parametrize(
    "bf16_ms, expected",
    [
        (850.0, "confirmed"),  # -15 %
        (600.0, "exceeded"),  # -40 %: a bigger cut
        (950.0, "fell short"),  # -5 %
        (1100.0, "contradicted"),  # +10 %: slower
    ],
)
def test_a_claimed_cut_gets_each_word_as_the_data_moves(bf16_ms, expected):
    assert _verdict("bf16-time", _df({"tf32": 1000.0, "bf16": bf16_ms}))["verdict"] == expected


SAMPLED = "mem_device_sampled_peak_bytes"


@pytest.mark.parametrize(
    "fp32_bytes, expected",
    [
        (10.5e9, "confirmed"),  # +5 % over TF32: the workspaces
        (10.05e9, "fell short"),  # +0.5 %
        (9.8e9, "contradicted"),  # less than TF32
    ],
)
def test_the_fp32_device_memory_claim_is_judged_from_the_sampled_device_memory(fp32_bytes, expected):
    df = _df({"fp32": 1000.0, "tf32": 400.0}, **{SAMPLED: {"fp32": fp32_bytes, "tf32": 10e9}})
    v = _verdict("fp32-device-memory", df)
    assert v["verdict"] == expected and v["figure"]["value"] == pytest.approx(fp32_bytes / 10e9 - 1)


@pytest.mark.parametrize("columns", [{}, {SAMPLED: {}}])  # the field missing (older records), or None (no NVML)
def test_the_fp32_device_memory_claim_is_not_measured_without_sampled_device_memory(columns):
    v = _verdict("fp32-device-memory", _df({"fp32": 1000.0, "tf32": 400.0}, **columns))
    assert v["verdict"] == "not measured" and v["figure"] is None
    assert v["why"] == claim_figures.NO_LAYER["device_sampled"]


@pytest.mark.parametrize(
    "profile, backend, status, expected",
    [
        ("a100", "cuda", "ok", "not applicable"),  # the vocab claim is about Hopper
        ("cpu", "cpu", "ok", "not applicable"),
        ("h100", "cuda", "oom", "not measured"),  # no timing for the stage
    ],
)
def test_not_applicable_and_not_measured(profile, backend, status, expected):
    df = _df({"flash": 140.0, "vocab": 100.0 if status == "ok" else None})
    v = _judge(_claim("vocab-h100"), df, profile, backend)
    assert v["verdict"] == expected
    if expected == "not applicable":  # the figure is still shown, and where the claim would be measured
        assert v["figure"]["value"] == pytest.approx(1.40) and claim_params.command(["hopper"]) in v["why"]
    else:
        assert v["figure"] is None and v["why"] == claim_figures.why_unmeasured(df, _claim("vocab-h100"))


def test_not_measured_always_says_why():
    for cid in (c["id"] for c in claim_params.load_claims()["claims"] if "hopper" in c["families"]):
        v = _verdict(cid, _df({}))
        assert v["verdict"] == "not measured" and v["figure"] is None and v["why"], cid


@pytest.mark.parametrize(
    "speedup, prose, table",
    [
        (1.58, "exceeded", "confirmed"),  # the write-up's table was right, its "30-40 %" too low
        (1.35, "confirmed", "fell short"),
    ],
)
def test_the_write_ups_prose_and_its_own_table_are_judged_apart(speedup, prose, table):
    df = _df({"flash": 100.0 * speedup, "vocab": 100.0})
    assert (_verdict("vocab-h100", df)["verdict"], _verdict("vocab-h100-table", df)["verdict"]) == (prose, table)


@pytest.mark.parametrize(
    "bf16_ms, prose, table", [(850.0, "confirmed", "fell short"), (780.0, "exceeded", "confirmed")]
)
def test_the_bf16_prose_and_table_claims_are_judged_apart(bf16_ms, prose, table):
    df = _df({"tf32": 1000.0, "bf16": bf16_ms})
    assert (_verdict("bf16-time", df)["verdict"], _verdict("bf16-time-table", df)["verdict"]) == (prose, table)


def test_the_table_claims_quote_the_write_ups_own_figures():
    """The write-up's table (a hand-written GPT-2 report): flash attention 87.7, 167, 322 ms and padded 56.2,
    103, 197 ms at B=16, 32, 64; TF32 133 ms and BF16 103 ms at B=16. Each claim quotes them, its range holds them."""
    vocab, bf16 = _claim("vocab-h100-table"), _claim("bf16-time-table")
    assert all(s in vocab["quote"] for s in ("87.7", "167", "322", "56.2", "103", "197"))
    for ratio in (87.7 / 56.2, 167 / 103, 322 / 197):
        assert vocab["expect"]["min"] <= ratio <= vocab["expect"]["max"]
    assert "133 ms" in bf16["quote"] and "103 ms" in bf16["quote"]
    assert bf16["expect"]["min"] <= 103 / 133 - 1 <= bf16["expect"]["max"]


@pytest.mark.parametrize(
    "profile, expected",
    [
        ("h100", "exceeded"),
        ("h100-pcie", "exceeded"),
        ("h200", "exceeded"),  # GH100, all of them
        ("a100", "not applicable"),
        ("b200", "not applicable"),
        ("gpua", "not applicable"),  # a name that is no profile has no family
    ],
)
def test_a_claim_about_the_h100_speaks_about_every_hopper_gpu(profile, expected):
    assert _verdict("vocab-h100", _df({"flash": 160.0, "vocab": 100.0}), profile)["verdict"] == expected


def test_the_h200_repeats_the_h100_claims_timings():
    assert ("vocab", "flash") in claim_params.timed_claim_pairs("h200")
    assert ("vocab", "flash") not in claim_params.timed_claim_pairs("b200")


def test_an_unknown_family_is_a_one_line_config_error(tmp_params_dir):
    path = tmp_params_dir / "h200.yaml"
    path.write_text(path.read_text().replace("family: hopper", "family: hoper"))
    for call in (lambda: config.load("h200"), lambda: config.profile_family("h200")):
        with pytest.raises(
            config.ConfigError, match=r"params/h200\.yaml: family 'hoper' is not a known chip family"
        ) as e:
            call()
        assert "\n" not in str(e.value)
    data = yaml.safe_load((tmp_params_dir / "claims.yaml").read_text())
    data["claims"][0]["families"] = ["gh100"]
    (tmp_params_dir / "claims.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(config.ConfigError, match="family 'gh100' is not a known chip family"):
        claim_params.load_claims(tmp_params_dir / "claims.yaml")


# ---------------------------------------------------------------- the lm_head GEMM sweep

ALIGNED = (50176, 50304, 50432)  # the multiples of 128 of a sweep around 50304
OTHERS = (50184, 50192, 50200)  # other multiples of 8


def _sweep(aligned_ms, other_ms, real_ms=30.0) -> dict:
    """A bf16 lm_head sweep record: multiples of 128, other multiples of 8 and the real 50257,
    at the given forward + backward times; different kernels at 50257 and 50304."""
    widths = list(zip(ALIGNED, aligned_ms)) + list(zip(OTHERS, other_ms)) + [(50257, real_ms)]
    points = [
        {
            "n": n,
            "dtype": "bf16",
            "total_ms": ms,
            "tflops": 1.0,
            "multiple_of": next(a for a in (128, 64, 32, 16, 8, 1) if n % a == 0),
        }
        for n, ms in widths
    ]
    slow = "void cutlass::Kernel2<cutlass_75_gemm_align1>(cutlass_75_gemm_align1::Params)"
    return {
        "schema_version": record.SCHEMA_VERSION,
        "kind": "gemm",
        "status": "ok",
        "m": 64,
        "k": 64,
        "dtypes": ["bf16"],
        "points": sorted(points, key=lambda p: p["n"]),
        "kernels": {
            "bf16": {"50257": {"fwd": [slow], "bwd": [slow]}, "50304": {"fwd": ["nvjet_fast"], "bwd": ["nvjet_fast"]}}
        },
    }


@pytest.mark.parametrize(
    "others, expected, no_change",
    [
        ((1.2, 1.25, 1.3), "confirmed", False),  # the multiples of 128 clearly faster
        ((1.04, 1.05, 1.06), "fell short", False),  # faster than every other multiple of 8, by less than claimed
        ((1.0, 1.03, 1.05), "contradicted", True),  # 1.03x, but 1.0 ms is inside the others' 1.0-1.05 ms: the scatter
        ((0.9, 0.92, 0.95), "contradicted", False),  # slower than every other multiple of 8
    ],
)
def test_the_multiples_of_128_claim_flips_with_the_sweep(others, expected, no_change):
    v = _verdict("hopper-multiples-of-128", _df({}), gemm=_sweep((1.0, 1.0, 1.0), others))
    assert v["verdict"] == expected and v["figure"]["value"] == pytest.approx(others[1])
    assert v["figure"]["no_change"] is no_change
    assert (
        _verdict("hopper-multiples-of-128", _df({}), "a100", _sweep((1.0,) * 3, others))["verdict"] == "not applicable"
    )


@pytest.mark.parametrize(
    "others, scatter",
    [
        # reports/h100 read "(8.1 %: 5.40 ms, the multiples of 128' median, inside the others' ...)": what the 8.1 %
        # is, said: the others' median over their fastest, the side the ratio lies on
        ((1.0, 1.06, 1.08), "their median of 1.06 ms lying 6.0 % above the fastest of them"),
        ((0.95, 0.98, 1.02), "their median of 0.98 ms lying 3.9 % below the slowest of them"),  # faster than 128
    ],
)
def test_the_multiples_of_128_scatter_says_what_it_is(others, scatter):
    v = _verdict("hopper-multiples-of-128", _df({}), gemm=_sweep((1.0, 1.0, 1.0), others))
    assert v["verdict"] == "contradicted" and v["figure"]["no_change"]
    lo, hi = f"{min(others):.2f}", f"{max(others):.2f}"
    assert v["figure"]["note"] == (
        f"; no measurable change: within the width-to-width scatter of no change (the other multiples of 8 take {lo}"
        f" to {hi} ms, {scatter}; the median of the multiples of 128, 1.00 ms, lies inside that range)"
    )
    assert "'" not in v["measured"]
    clear = _verdict("hopper-multiples-of-128", _df({}), gemm=_sweep((1.0, 1.0, 1.0), (1.12, 1.2, 1.3)))
    assert clear["verdict"] == "confirmed" and not clear["figure"]["note"]  # outside the others' range: no scatter


def test_50257_is_not_among_the_other_multiples_of_8():
    """Other multiples of 8 at 1.0, 1.05 and 1.2 ms: median 1.05, no measurable change (1.0 ms lies in
    their range). Counted among them, 50257's 30 ms would lift the median to 1.125 and confirm the claim."""
    gemm = _sweep((1.0, 1.0, 1.0), (1.0, 1.05, 1.2))
    aligned, other = gemm_alignment.alignment_groups(gemm, "bf16")
    assert [p["n"] for p in aligned] == list(ALIGNED) and [p["n"] for p in other] == list(OTHERS)
    v = _verdict("hopper-multiples-of-128", _df({}), gemm=gemm)
    assert v["verdict"] == "contradicted" and v["figure"]["value"] == pytest.approx(1.05)


def test_the_vocab_chapter_reads_the_sweep_without_50257(tmp_path):
    params = tiny_params(["fp32", "vocab"])
    params.model.vocab_size, params.model.padded_vocab_size = 50257, 50304
    recs = [make_record(params, s, 2, [10.0] * 5, [3.0] * 6) for s in ("fp32", "vocab")]
    report_dir = write_report_dir(tmp_path / "r", params, recs)
    store.write_atomic(report_dir / "results" / "gemm" / "lm_head.json", _sweep((1.0, 1.0, 1.0), (1.0, 1.1, 1.3)))
    text = gemm_sweep_view.gemm_md(loader.load(report_dir))
    assert "the 3 other multiples of 8 1.10 ms" in text  # with 50257's 30 ms it would be 1.20
    assert "every multiple of 8 runs about as fast" in text
    assert "n=50257, not a multiple of 8, takes 30.00 ms" in text
    assert "running other kernels (forward: `cutlass_75_gemm_align1` against `nvjet_fast`)" in text
    faster = _sweep((1.0, 1.0, 1.0), (1.2, 1.25, 1.3))
    store.write_atomic(report_dir / "results" / "gemm" / "lm_head.json", faster)
    assert "the multiples of 128 run faster than every other multiple of 8" in gemm_sweep_view.gemm_md(
        loader.load(report_dir)
    )


def test_the_kernel_claim_says_not_measured_and_why():
    v = _verdict("lm-head-kernel", _df({}))
    assert v["verdict"] == "not measured" and v["figure"] is None and v["why"]
    slower = _verdict("lm-head-kernel", _df({}), gemm=_sweep((1.0,) * 3, (1.0,) * 3))
    assert slower["verdict"] == "exceeded" and slower["figure"]["kernels_differ"]  # 30x the time, other kernels
    same = _sweep((1.0,) * 3, (1.0,) * 3)
    same["kernels"]["bf16"]["50304"] = same["kernels"]["bf16"]["50257"]
    v = _verdict("lm-head-kernel", _df({}), gemm=same)  # 30x the time still, but no fallback kernel
    assert v["verdict"] == "contradicted" and not v["figure"]["kernels_differ"]


@pytest.mark.parametrize(
    "real_ms, expect, word",
    [
        (5.61, None, "exceeded"),  # reports/h100: 5.61x the time, read "confirmed" against "at least 1.05x"
        (1.35, None, "confirmed"),  # 35 % slower: inside "30-40 % slower"
        (1.10, None, "fell short"),  # slower, by less than claimed
        (5.61, {"min": 1.05}, "confirmed"),  # the old, open range: the rule is the data
    ],
)
def test_30_to_40_percent_slower_is_a_closed_range_of_time_ratios(tmp_params_dir, real_ms, expect, word):
    """The write-up's "30-40 % slower" is 1.30x to 1.40x the time (widened by 0.03): the figure is a time ratio, so is
    the range, and a figure beyond it is further from no change than claimed: exceeded."""
    claim = _claim("lm-head-kernel")
    assert claim["expect"] == {"min": 1.27, "max": 1.43}
    if expect:  # params/claims.yaml with the old range: the file refuses it, the verdict reads it anyway
        data = yaml.safe_load((tmp_params_dir / "claims.yaml").read_text())
        next(c for c in data["claims"] if c["id"] == "lm-head-kernel")["expect"] = expect
        (tmp_params_dir / "open.yaml").write_text(yaml.safe_dump(data, allow_unicode=True))
        with pytest.raises(config.ConfigError, match=r"quotes a range \(30-40 %\) but expects an open one"):
            claim_params.load_claims(tmp_params_dir / "open.yaml")
        claim = {**claim, "expect": expect}
    gemm = _sweep((1.0,) * 3, (1.0,) * 3, real_ms=real_ms)
    v = _judge(claim, _df({}), "h100", "cuda", gemm)
    assert v["verdict"] == word and v["figure"]["value"] == pytest.approx(real_ms)
    assert ("1.27× to 1.43× the time" in v["check"]) is (expect is None)


# ---------------------------------------------------------------- the claims of seeds 001 and 002


def test_every_claim_names_its_source_and_an_unmeasurable_one_says_why(tmp_params_dir):
    data = claim_params.load_claims()
    assert {c["source"] for c in data["claims"]} == {"000", "001", "002"} == set(data["sources"])
    assert len({c["cite"] for c in data["claims"]}) == 3  # each source cited by what it is
    assert all(c["reason"] for c in data["claims"] if c["metric"] == "none")
    path = tmp_params_dir / "claims.yaml"
    for cid, change, message in [
        ("fp8-2x-gemm", {"reason": None}, "must say why"),
        ("tf32-quality", {"versus": "bf16"}, "the loss gate of tf32 is against fp32"),
        ("fp8-hopper", {"source": "009"}, "names no source"),
        ("fp8-hopper", {"quote": ""}, "quotes no sentence"),
        ("tf32-speedup", {"explain": "GEMMs"}, "is no kernel category"),
    ]:
        broken = yaml.safe_load(path.read_text())
        next(c for c in broken["claims"] if c["id"] == cid).update(change)
        (tmp_params_dir / "broken.yaml").write_text(yaml.safe_dump(broken))
        with pytest.raises(config.ConfigError, match=message):
            claim_params.load_claims(tmp_params_dir / "broken.yaml")


@pytest.mark.parametrize(
    "fp8_ms, noise, hopper, twice",
    [
        (90.0, None, "confirmed", "fell short"),  # 1.11x: faster, far from 2x
        (50.0, None, "confirmed", "confirmed"),  # 2.00x: the datasheet's ratio
        (110.0, 0.02, "contradicted", "contradicted"),  # 0.91x: slower beyond a 2 % noise
        (101.0, 0.02, "contradicted", "contradicted"),  # 0.99x: no measurable change, within the 2 % noise of 1
        (97.0, 0.02, "confirmed", "fell short"),  # 1.03x: faster beyond it
    ],
)
def test_the_fp8_claims_flip_with_the_largest_fp8_speed_up(fp8_ms, noise, hopper, twice):
    """Every form measured: the hand-written layers and torchao's against torch.compile, torchao's lm_head
    against the loss-only forward; the largest speed-up decides (here the hand-written one's, the others smaller)."""
    df = _df({"compile": 100.0, "fp8": fp8_ms, "fp8_torchao": 120.0, "loss_only": 80.0, "fp8_head": 90.0})
    v = _verdict("fp8-hopper", df, noise=noise)
    assert v["verdict"] == hopper and v["pair"] == ("fp8", "compile") and v["figure"]["form"] == "fp8"
    assert _verdict("fp8-2x-step", df, noise=noise)["verdict"] == twice
    assert v["figure"]["value"] == pytest.approx(100.0 / fp8_ms) and v["figure"]["no_change"] is (fp8_ms == 101.0)
    others = {b["form"]: b["value"] for b in v["beside"] if "form" in b}
    assert others == pytest.approx({"fp8_torchao": 100 / 120, "fp8_head": 80 / 90})
    assert _verdict("fp8-hopper", df, "a100")["verdict"] == "not applicable"  # use_fp8 is Hopper's rule


def test_the_fp8_claim_rests_on_the_form_that_pays_and_names_the_ones_not_measured():
    """The hand-written layers lose (0.91x) and are what the old verdict rested on; torchao's lm_head pays
    (1.25x): the verdict follows the lm_head. Without any form it is not measured, each form saying why."""
    df = _df({"compile": 100.0, "fp8": 110.0, "loss_only": 100.0, "fp8_head": 80.0})
    v = _verdict("fp8-hopper", df, noise=0.01)
    assert v["verdict"] == "confirmed" and v["pair"] == ("fp8_head", "loss_only")
    assert v["figure"]["value"] == pytest.approx(1.25)
    assert [b["value"] for b in v["beside"] if b.get("form") == "fp8"] == pytest.approx([100 / 110])
    assert len(v["beside"]) == 4  # the hand-written layers, torchao's not measured (and why), the classifier, sizes
    assert _verdict("fp8-hopper", _df({"compile": 100.0, "fp8": 110.0}), noise=0.01)["verdict"] == "contradicted"
    none = _verdict("fp8-hopper", _df({"compile": 100.0, "fp8": None}))
    assert none["verdict"] == "not measured" and none["figure"] is None
    assert "FP8 linear layers at B=2: oom" in none["measured"]  # each form not measured says why, by its title


def _gated(tf32_offset: float, tf32=True):
    """fp32 and tf32 records with a tolerance of 0.05 nats: tf32's loss curve `tf32_offset` above fp32's."""
    params = tiny_params(["fp32", "tf32"])
    recs = [make_record(params, "fp32", 2, [100.0] * 5, [3.0] * 6)]
    recs += [
        make_record(params, "tf32", 2, [40.0] * 5, [3.0 + tf32_offset] * 6)
        if tf32
        else make_record(params, "tf32", 2, status="oom", reason="out of memory")
    ]
    return decide.table(recs, params.stages, tolerance=0.05)


@pytest.mark.parametrize(
    "offset, expected, words",
    [(0.01, "undecided", "catches only a broken lever"), (0.2, "contradicted", "the check failed at B=2")],
)
def test_the_tf32_quality_claim_flips_with_the_loss_gate(offset, expected, words):
    """A check that held read "confirmed" for "no measurable impact on training quality", yet the divergence check
    catches only a broken lever: it leaves the claim undecided, and a failed check still contradicts it."""
    v = _judge(_claim("tf32-quality"), _gated(offset), "h100", "cuda", tolerance=0.05)
    assert v["verdict"] == expected and v["figure"]["value"] == pytest.approx(offset) and words in v["measured"]
    assert "tolerance of 0.05 nats" in v["check"]


def test_the_tf32_quality_claim_names_the_batch_sizes_its_gate_was_checked_at():
    """reports/h100: TF32 ran at B=16 alone (B=64 out of memory), and the check read "holds at every batch size"."""
    params = tiny_params(["fp32", "tf32"])
    recs = [make_record(params, "fp32", b, [100.0] * 5, [3.0] * 6) for b in (2, 4)]
    recs += [make_record(params, "tf32", 2, [40.0] * 5, [3.01] * 6)]
    recs += [make_record(params, "tf32", 4, status="oom", reason="out of memory")]
    v = _judge(_claim("tf32-quality"), decide.table(recs, params.stages, tolerance=0.05), "h100", "cuda")
    assert v["verdict"] == "undecided" and "the divergence check holds at B=2 (" in v["check"]
    assert "every batch size" not in v["check"] and "the check held at B=2 (TF32 at B=4: oom);" in v["measured"]
    recs[-1] = make_record(params, "tf32", 4, [40.0] * 5, [3.01] * 6)  # TF32 at both: both named
    v = _judge(_claim("tf32-quality"), decide.table(recs, params.stages, tolerance=0.05), "h100", "cuda")
    assert "holds at B=2, 4 (" in v["check"] and "the check held at B=2, 4;" in v["measured"]


def test_the_tf32_quality_claim_without_a_gate_says_why():
    df = _gated(0.0, tf32=False)
    v = _verdict("tf32-quality", df)
    assert v["verdict"] == "not measured" and v["why"] == claim_figures.why_unmeasured(df, _claim("tf32-quality"))
    df = _df({"fp32": 100.0, "tf32": 40.0})  # a table without a tolerance: no gate
    v = _verdict("tf32-quality", df)
    assert v["verdict"] == "not measured" and v["why"] == claim_figures.why_unmeasured(df, _claim("tf32-quality"))


@pytest.mark.parametrize(
    "profile, tf32_ms, expected",
    [
        ("a100", 350.0, "confirmed"),  # 2.86x: within "up to 3x"
        ("a100", 600.0, "fell short"),  # 1.67x
        ("h100", 350.0, "not applicable"),  # a claim about the A100
    ],
)
def test_the_tf32_a100_claim_speaks_about_ampere_and_names_the_command_elsewhere(profile, tf32_ms, expected):
    v = _verdict("tf32-a100", _df({"fp32": 1000.0, "tf32": tf32_ms}), profile)
    assert v["verdict"] == expected and v["figure"]["value"] == pytest.approx(1000.0 / tf32_ms)
    assert (claim_params.command(["ampere"]) in v["why"]) is (expected == "not applicable")
    oom = _verdict("tf32-a100", _df({"fp32": 1000.0, "tf32": None}), "a100")
    assert oom["verdict"] == "not measured" and oom["figure"] is None


def _sdpa(**tokens_per_s) -> list[dict]:
    """The flash stage with each SDPA backend forced, at the given tokens/s (None: not applicable)."""
    params = tiny_params(["flash"])
    out = []
    for name, tps in tokens_per_s.items():
        rec = (
            make_record(params, "flash", 2, [2 * 64 / tps * 1000] * 5, [3.0] * 6)
            if tps
            else make_record(params, "flash", 2, status="not_applicable", reason="no kernel")
        )
        out.append({**rec, "variant": f"SDPA {name}"})
    return out


def test_the_claims_this_tool_cannot_check_are_not_measured_and_say_why():
    gemm = _verdict("fp8-2x-gemm", _df({}))
    assert gemm["verdict"] == "not measured" and gemm["why"] == _claim("fp8-2x-gemm")["reason"]
    assert _verdict("fp8-2x-gemm", _df({}), "a100")["verdict"] == "not applicable"


def test_flash_attention_3_without_a_kernel_profile_is_not_measured_and_says_so():
    fa3 = _judge(_claim("fa3-hopper"), _df({}), "h200", "cuda", sdpa=_sdpa(flash=2000.0, cudnn=3000.0, efficient=None))
    assert fa3["verdict"] == "not measured" and fa3["figure"] is None and fa3["ran"] is None
    assert fa3["why"].endswith("forced at B=2: cudnn 3,000 tok/s, flash 2,000 tok/s, efficient not applicable")


def test_a_kernel_name_in_the_claims_table_breaks_between_its_tokens_never_inside_one():
    """reports/h100's PDF split cutlass_75_tensorop_bf16_s1688gemm_bf16_128x|128_tn_align1 and ..._coopB_TN|N: report.css
    let a claims cell break anywhere. A cell now breaks at spaces and at the <wbr> after each separator of an
    identifier (_ :: < and a comma outside a number), and the stylesheet breaks a token elsewhere only if it cannot
    fit a line. Real records: reports/h100."""
    from lib.report import export

    text = claims_view.breakable(
        "at 50304: nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN); 1,979 TFLOPS, at::native::k<a,b>"
    )
    assert "nvjet_<wbr>sm90_<wbr>tst_<wbr>192x192_<wbr>64x4_<wbr>2x1_<wbr>v_<wbr>bz_<wbr>coopB_<wbr>TNN);" in text
    assert "1,979 TFLOPS, at::native::k&lt;a,b&gt;" in text  # a number stays whole, and a short word
    # a reviewer: lm_|head and CHAPTERS=size_|sweep read as two words and broke a copied command
    assert claims_view.breakable("make report GPU=h100 CHAPTERS=size_sweep, lm_head") == (
        "make report GPU=h100 CHAPTERS=size_sweep, lm_head"
    )
    rep = loader.load(paths.ROOT / "reports" / "h100")
    table = claims_view.html(rep)
    kernel = "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1"
    assert kernel not in table and kernel.replace("_", "_<wbr>") in table
    # every opportunity follows a separator: none inside a token
    assert table.count("<wbr>") > 20 and not re.search(r"[^_:<,]<wbr>", table)
    cell = re.search(r"table\.claims td \{([^}]*)\}", export.CSS.read_text()).group(1)
    assert "overflow-wrap: break-word" in cell


def test_the_claims_table_names_stages_by_their_titles_never_their_keys():
    """A reviewer found "fp8_torchao vs compile" in reports/h100's PDF. Real records: reports/h100."""
    from lib.core import stages

    rep = loader.load(paths.ROOT / "reports" / "h100")
    text = re.sub(r"<[^>]+>", "", claims_view.html(rep))
    assert not re.search(r"\b(?:%s) vs " % "|".join(stages.ORDER), text)  # a pair of keys
    assert not [k for k in stages.ORDER if "_" in k and re.search(rf"\b{k}\b", text)]
    assert "TF32 vs FP32 baseline: 2.34× to 2.86×" in text and "FP8 lm_head (torchao) over Loss-only forward" in text


def test_the_claims_table_cites_each_source_by_what_it_is_and_quotes_each_claim():
    """The claims cited "[000]", a write-up no clone contains: each source is now a row saying what it is, each claim
    carries the sentence it is read from. Real records: reports/h100."""
    rep = loader.load(paths.ROOT / "reports" / "h100")
    data, table = claim_params.load_claims(), claims_view.html(rep)
    assert all(claims_view.breakable(c["quote"]) in table for c in data["claims"])
    assert all(html.escape(what) in table for what in data["sources"].values())
    assert not re.search(r"\[\d{3}\]", table)
    rows = rep.decided["claims"]["verdicts"]  # what decisions.json keeps: the table is drawn from it
    assert {r["source"] for r in rows} == {c["cite"] for c in data["claims"]} and all(r["quote"] for r in rows)


# ---------------------------------------------------------------- how a quoted figure becomes its range


def _rule(rule: str, x) -> tuple[float, float]:
    """The range claims_view.RANGES gives a quoted figure `x` (a quoted range: a pair)."""
    lo, hi = x if isinstance(x, tuple) else (x, x)
    if rule == "prose":  # X ± 10 % of X
        return min(x * 0.9, x * 1.1), max(x * 0.9, x * 1.1)
    if rule == "up to":  # a best case
        return x * 0.9, x + 0.03
    if rule == "only about":  # a small gain: faster, up to X + 0.03
        return 1.0, 1 + x + 0.03
    return lo - 0.03, hi + 0.03  # widened for rounding


# Each claim with a closed range, the rule of RANGES its quote falls under and the figure it quotes.
QUOTED = {
    "tf32-speedup": ("prose", 2.6),
    "bf16-time": ("prose", -0.15),
    "bf16-time-table": ("rounding", -0.226),
    "bf16-memory": ("prose", -0.24),
    "flash-time": ("rounding", (-0.20, -0.15)),
    "vocab-h100": ("rounding", (1.30, 1.40)),
    "vocab-h100-table": ("rounding", (1.56, 1.63)),
    "vocab-a100": ("only about", 0.03),
    "lm-head-kernel": ("rounding", (1.30, 1.40)),  # 30-40 % slower: 1 + X/100 times the time
    "overall-speedup": ("prose", 5.8),
    "overall-memory": ("prose", -0.45),
    "tf32-a100": ("up to", 3.0),
    "fp8-2x-step": ("prose", 2.0),
    "fp8-2x-gemm": ("prose", 2.0),
    "fa3-2x": ("prose", 2.0),
}


@pytest.mark.parametrize("cid", sorted(QUOTED))
def test_each_closed_range_is_the_one_the_tables_note_gives_its_quoted_figure(cid):
    """The tolerance varied from claim to claim (about 15 %: -16.5 to -13.5 %; 22.6 %: -25.6 to -19.6 %; up to 3x:
    2.70x to 3.03x) and its rule lived only in params/claims.yaml: the table's note states it (RANGES), and every
    closed range follows it, so a reader of the PDF can check each one."""
    expect, (rule, x) = _claim(cid)["expect"], QUOTED[cid]
    assert (expect["min"], expect["max"]) == pytest.approx(_rule(rule, x), abs=1e-9)


def test_the_claims_tables_note_states_how_a_quoted_figure_becomes_its_range():
    closed = {c["id"] for c in claim_params.load_claims()["claims"] if {"min", "max"} <= set(c.get("expect", {}))}
    assert closed == set(QUOTED)  # a new closed range names its rule here
    assert _rule("rounding", -0.15) != pytest.approx(_rule("prose", -0.15))  # -18 to -12 % is not about 15 %'s range
    for words in ("X ± 10 % of X", "widened by 0.03 (3 points) for rounding", "X − 10 % to X + 0.03", "1 + X/100"):
        assert words in claims_view.RANGES
    rep = loader.load(paths.ROOT / "reports" / "h100")
    assert html.escape(claims_view.RANGES) in claims_view.html(rep)


# ---------------------------------------------------------------- judged once, drawn from decisions.json


def test_the_claims_are_judged_in_lib_results_and_the_views_only_draw_them():
    """Decide once, then lay out: decisions.compute judges every claim into decisions.json's `claims`; no module of
    lib/report imports the modules that judge one (claims, claim_kinds, claim_figures), so a view cannot judge again."""
    import ast

    judging = {"lib.results.claims", "lib.results.claim_kinds", "lib.results.claim_figures"}
    for path in (paths.ROOT / "lib" / "report").glob("*.py"):
        tree = ast.parse(path.read_text())
        named = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
            f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names
        }
        assert not named & judging, f"{path.name} imports {sorted(named & judging)}"


def test_the_claims_table_is_drawn_from_the_decisions_alone():
    """The table reads rep.decided["claims"]: a verdict changed there is the verdict the table shows."""
    rep = loader.load(paths.ROOT / "reports" / "h100")
    rows = rep.decided["claims"]["verdicts"]
    first = next(i for i, r in enumerate(rows) if r["verdict"] == "fell short")
    flipped = [{**r, "verdict": "exceeded"} if i == first else r for i, r in enumerate(rows)]
    rep.__dict__["decided"] = {**rep.decided, "claims": {**rep.decided["claims"], "verdicts": flipped}}
    text = claims_view.html(rep)
    assert text.count(">exceeded</span>") == sum(r["verdict"] == "exceeded" for r in flipped)


def test_decisions_json_keeps_each_claims_verdict_as_plain_data():
    """decisions.json's `claims` is plain JSON (lists, not tuples; Python floats), so the file a render writes reads
    back equal to what the views drew, and two renders write the same bytes."""
    import json

    decided = loader.load(paths.ROOT / "reports" / "h100").decided
    judged = decided["claims"]
    assert json.loads(json.dumps(judged)) == judged
    assert [r["id"] for r in judged["verdicts"]] == [c["id"] for c in claim_params.load_claims()["claims"]]
    assert set(judged["sources"]) == {r["source_key"] for r in judged["verdicts"]}
    again = loader.load(paths.ROOT / "reports" / "h100").decided["claims"]
    assert json.dumps(again) == json.dumps(judged)
