"""The levers from the field's own kernels (torchao float8, cut-cross-entropy, compile modes,
forced SDPA backends), the recipe at GPT-2's global batch and the leave-one-out ablation."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from conftest import make_record, tiny_params, write_report_dir

from lib.core import levers, record, stages
from lib.measure import worker
from lib.report import ablation_view, batch_sweep_view, frontier_view, loader, prose
from lib.results import decide, decisions, leave_one_out, store
from lib.run import recipe
from lib.train.model import GPT, GPTConfig, fused_linear_cross_entropy

HOPPER = {"backend": "cuda", "capability": [9, 0], "count": 1}
AMPERE = {"backend": "cuda", "capability": [8, 0], "count": 1}
CPU = {"backend": "cpu", "count": 1}


@pytest.mark.parametrize(
    "key, device, reason",
    [
        ("fp8_torchao", HOPPER, None),
        ("fp8_torchao", AMPERE, "compute capability 8.0"),
        ("fp8_torchao", CPU, "cpu backend"),
        ("fused_ce", AMPERE, None),
        ("fused_ce", {"backend": "cuda", "capability": [7, 5], "count": 1}, "7.5"),
        ("fused_ce", CPU, "cpu backend"),
        ("autotune", AMPERE, None),
        ("autotune", CPU, "cpu backend"),
        ("bf16_residual", CPU, None),
        ("loss_only", CPU, None),
        ("fp8_head", HOPPER, None),
        ("fp8_head", AMPERE, "compute capability 8.0"),
    ],
)
def test_frontier_applicability(key, device, reason, monkeypatch):
    monkeypatch.setattr(stages.importlib.util, "find_spec", lambda name: object())  # as if installed
    got = stages.get(key).not_applicable(device)
    assert (got is None) if reason is None else (reason in got)


def test_a_missing_package_is_a_reason_not_a_crash():
    stage = dataclasses.replace(stages.get("fused_ce"), package="no_such_package_of_levers")
    assert stage.not_applicable(HOPPER) == (
        "Fused linear cross-entropy (cut-cross-entropy) needs the "
        "no_such_package_of_levers package, which is not installed here"
    )


def test_frontier_levers_are_added_to_compile():
    assert [decide.previous_stage(k) for k in ("fp8", "fp8_torchao", "fused_ce", "autotune")] == [
        "compile",
        "compile",
        "compile",
        "compile",
    ]
    assert stages.get("autotune").loss == "cross_entropy"
    assert stages.get("autotune").compile_mode == "max-autotune-no-cudagraphs"
    # A new switch leaves every earlier stage's identity (and so its fingerprint) as it was.
    assert stages.get("compile").identity() == {
        "key": "compile",
        "peak": "bf16",
        "tf32": True,
        "autocast": "bfloat16",
        "attention": "sdpa",
        "padded_vocab": True,
        "fused_adamw": True,
        "compile": True,
    }


def test_torchao_float8_trains_like_the_vocab_stage():
    """torchao's float8 Linear layers run on the CPU too (torch._scaled_mm has a CPU kernel): the
    stage swaps only the blocks' Linear layers and its loss stays within tolerance of the vocab
    stage's. Eager here (compile off) to keep the test fast; the GPU report compiles it."""
    pytest.importorskip("torchao")
    params = tiny_params(warmup=1, timed=5)
    job = {"params": params, "batch_size": 2, "profile": False, "energy": False}
    vocab = worker.run({**job, "stage": "vocab"})
    fp8 = worker.run({**job, "stage": "fp8_torchao", "stage_overrides": {"compile": False}})
    assert fp8["status"] == "ok", fp8.get("reason")
    assert abs(fp8["final_loss"] - vocab["final_loss"]) < params.run.loss_tolerance
    assert fp8["init_checksum"] == vocab["init_checksum"]


def test_a_forced_sdpa_backend_the_device_lacks_is_not_applicable():
    params = tiny_params(warmup=1, timed=5)
    rec = worker.run(
        {
            "params": params,
            "stage": "flash",
            "batch_size": 2,
            "stage_overrides": {"sdpa_backend": "cudnn"},
            "profile": False,
            "energy": False,
        }
    )
    assert rec["status"] == "not_applicable" and "no cudnn SDPA kernel" in rec["reason"]
    forced_math = worker.run(
        {
            "params": params,
            "stage": "flash",
            "batch_size": 2,
            "profile": False,
            "energy": False,
            "stage_overrides": {"sdpa_backend": "math"},
        }
    )
    assert forced_math["status"] == "ok" and "math" in forced_math["sdpa_backend"]


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="cut-cross-entropy's kernels are Triton GPU kernels; the GPU report run executes this test",
)
def test_cut_cross_entropy_matches_the_plain_loss_and_gradients():
    """Exact form: loss and both gradients equal to lm_head + cross_entropy under autocast. The
    library's default filter, at an initialisation-like near-uniform softmax, drops part of the
    weight gradient: its error is several times the exact form's (8x on an H100), which is why the
    stage turns it off."""
    pytest.importorskip("cut_cross_entropy")
    torch.manual_seed(0)
    n, d, v = 1024, 128, 50304  # GPT-2's padded vocabulary: every probability starts near 2e-5
    x = torch.randn(n, d, device="cuda", requires_grad=True)
    w = (0.02 * torch.randn(v, d, device="cuda")).requires_grad_()
    t = torch.randint(0, v - 64, (n,), device="cuda")

    def loss_and_grads(fn):
        x.grad = w.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fn()
        loss.backward()
        return float(loss), x.grad.clone(), w.grad.clone()

    plain, gx, gw = loss_and_grads(lambda: F.cross_entropy(F.linear(x, w), t))
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    exact, ex, ew = loss_and_grads(lambda: fused_linear_cross_entropy(x, w, t))
    assert abs(exact - plain) < 2e-3 and rel(ex, gx) < 2e-2 and rel(ew, gw) < 2e-2
    _, fx, fw = loss_and_grads(lambda: fused_linear_cross_entropy(x, w, t, "cut_cross_entropy_filtered"))
    assert rel(fw, gw) > 4 * rel(ew, gw)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="cut-cross-entropy runs on CUDA only")
def test_the_model_with_cut_cross_entropy_gives_the_plain_loss():
    pytest.importorskip("cut_cross_entropy")
    cfg = dict(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=1024, real_vocab_size=1000, attention="sdpa")
    idx = torch.randint(0, 1000, (4, 64), device="cuda")
    losses = []
    for loss in ("cross_entropy", "cut_cross_entropy"):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**cfg, loss=loss)).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            losses.append(float(model(idx, idx)[1]))
    assert abs(losses[0] - losses[1]) < 2e-3


# ---------------------------------------------------------------- recipe and ablation


def test_the_bf16_residual_stream_reaches_every_block_in_bf16():
    """The switch changes what the blocks read (bf16, not autocast's fp32) and the loss stays within
    tolerance of the vocab stage's; eager (compile off) to keep the test fast."""
    params = tiny_params(warmup=1, timed=5)
    seen = {}
    for dtype in (None, "bfloat16"):
        model = GPT(
            GPTConfig(
                n_layer=2,
                n_head=2,
                n_embd=64,
                block_size=64,
                vocab_size=1024,
                real_vocab_size=1000,
                attention="sdpa",
                residual_dtype=dtype,
            )
        )
        model.transformer.h[1].register_forward_pre_hook(lambda m, args, d=dtype: seen.__setitem__(d, args[0].dtype))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.randint(0, 1000, (2, 64)), torch.randint(0, 1000, (2, 64)))
    assert seen == {None: torch.float32, "bfloat16": torch.bfloat16}
    job = {"params": params, "batch_size": 2, "profile": False, "energy": False}
    vocab = worker.run({**job, "stage": "vocab"})
    resid = worker.run({**job, "stage": "bf16_residual", "stage_overrides": {"compile": False}})
    assert resid["status"] == "ok" and resid["init_checksum"] == vocab["init_checksum"]
    assert resid["final_loss"] != vocab["final_loss"]
    assert abs(resid["final_loss"] - vocab["final_loss"]) < params.run.loss_tolerance


def test_the_loss_only_forward_keeps_the_loss_and_its_gradients():
    """return_logits=False drops the logits output and nothing else: the same loss and the same
    gradients, in the harness's model and in the plain loop's, and the harness's step passes it."""
    from lib.train import plain_loop, step

    torch.manual_seed(0)
    model = GPT(
        GPTConfig(
            n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=1024, real_vocab_size=1000, attention="sdpa"
        )
    )
    idx, tgt = torch.randint(0, 1000, (2, 64)), torch.randint(0, 1000, (2, 64))
    outs = []
    for keep in (True, False):
        model.zero_grad()
        logits, loss = model(idx, tgt, return_logits=keep)
        loss.backward()
        outs.append((logits, loss.detach(), model.lm_head.weight.grad.clone()))
    assert outs[0][0].shape == (2, 64, 1024) and outs[1][0] is None
    assert torch.equal(outs[0][1], outs[1][1]) and torch.equal(outs[0][2], outs[1][2])
    plain = plain_loop.PlainGPT(1024, 64, 2, 2, 64, True)
    assert plain(idx, tgt, return_logits=False)[0] is None
    assert torch.equal(plain(idx, tgt, return_logits=False)[1], plain(idx, tgt)[1])
    params = tiny_params(warmup=1, timed=5)
    ts = step.build(params, dataclasses.replace(stages.get("loss_only"), compile=False), "cpu")
    seen = []
    ts.forward.register_forward_hook(lambda m, args, out: seen.append(out[0]))
    ts(idx, tgt)
    assert seen == [None] and step.build(params, stages.get("vocab"), "cpu").return_logits
    assert {**stages.get("loss_only").identity(), "key": "bf16_residual", "return_logits": True} == {
        **stages.get("bf16_residual").identity(),
        "return_logits": True,
    }


def test_fp8_on_the_lm_head_alone_keeps_its_weight_tied():
    """torchao converts the lm_head and nothing else, in the harness and in the plain loop alike;
    the converted lm_head still shares its weight with the token embedding (GPT-2's tying)."""
    pytest.importorskip("torchao")
    from lib.train import plain_loop, step

    params = tiny_params(warmup=1, timed=5)
    ts = step.build(params, dataclasses.replace(stages.get("fp8_head"), compile=False), "cpu")
    assert type(ts.model.lm_head).__name__ == "Float8Linear"
    assert ts.model.lm_head.weight is ts.model.transformer.wte.weight
    assert {type(m).__name__ for m in ts.model.transformer.h.modules()} >= {"Linear"}
    assert "Float8Linear" not in {type(m).__name__ for m in ts.model.transformer.h.modules()}
    job = {"params": params, "batch_size": 2, "profile": False, "energy": False}
    vocab = worker.run({**job, "stage": "vocab"})
    head = worker.run({**job, "stage": "fp8_head", "stage_overrides": {"compile": False}})
    assert head["status"] == "ok" and abs(head["final_loss"] - vocab["final_loss"]) < params.run.loss_tolerance
    switches = {
        "tf32": True,
        "autocast": "bfloat16",
        "attention": "sdpa",
        "padded_vocab": True,
        "fused_adamw": True,
        "compile": False,
        "residual_dtype": "bfloat16",
        "fp8_lm_head": "tensorwise",
    }
    built = []
    real_forward = plain_loop.PlainGPT.forward

    def spy(self, idx, targets, **kwargs):
        built.append((type(self.lm_head).__name__, self.lm_head.weight is self.wte.weight, self.residual_dtype))
        return real_forward(self, idx, targets, **kwargs)

    plain_loop.PlainGPT.forward = spy
    try:
        rec = plain_loop.run({"params": params, "stage": "fp8_head", "batch_size": 2, "switches": switches})
    finally:
        plain_loop.PlainGPT.forward = real_forward
    assert rec["status"] == "ok" and built[0] == ("Float8Linear", True, torch.bfloat16)


def test_levers_of_a_configuration():
    assert list(levers.levers_of(stages.get("fused_ce"))) == [
        "TF32",
        "BF16 autocast",
        "SDPA attention",
        "padded vocabulary",
        "fused AdamW",
        "torch.compile",
        "fused linear cross-entropy",
    ]
    autotune = levers.levers_of(stages.get("autotune"))
    assert "max-autotune" in autotune and "torch.compile" not in autotune
    assert list(levers.levers_of(stages.get("fp32"))) == []
    head_levers = levers.levers_of(stages.get("fp8_head"))
    assert list(head_levers)[-4:] == [
        "torch.compile",
        "BF16 residual stream",
        "loss-only forward",
        "FP8 lm_head (torchao)",
    ]
    # Removing a lever others need removes them too (on the H100 both were errors, not results).
    assert head_levers["BF16 autocast (and BF16 residual stream, which needs it)"] == {
        "autocast": None,
        "residual_dtype": None,
    }
    assert head_levers["padded vocabulary (and FP8 lm_head (torchao), which needs it)"] == {
        "padded_vocab": False,
        "fp8_lm_head": None,
    }
    # Each lever removed in turn leaves exactly the stage it was added to, switch for switch.
    head = stages.get("fp8_head")
    without = dataclasses.replace(head, **levers.LEVERS["FP8 lm_head (torchao)"])
    assert {**without.identity(), "key": "loss_only"} == stages.get("loss_only").identity()


def test_micro_steps_reach_the_global_batch():
    p = tiny_params()
    p.evidence.global_batch_tokens = 524288
    p.run.seq_len = 1024
    assert [p.micro_steps(b) for b in (16, 64, 128, 96)] == [32, 8, 4, None]


def test_recipe_jobs_alternate_the_sides_in_fresh_processes(tmp_path):
    p = tiny_params(batch_sizes=(2, 4))
    sides = [j["variant"] for j in recipe.recipe_jobs(p, tmp_path, {"stage": "vocab", "batch_size": 2})]
    assert sides[:2] == ["recipe: recommended", "recipe: baseline"]  # the harness side is depth
    assert "recipe: baseline-harness" not in sides
    p.depth = "full"
    jobs = recipe.recipe_jobs(p, tmp_path, {"stage": "vocab", "batch_size": 2})
    assert [j["variant"] for j in jobs[:3]] == ["recipe: recommended", "recipe: baseline-harness", "recipe: baseline"]
    assert len(jobs) == 3 * p.evidence.repeats and len({j["fingerprint"] for j in jobs}) == len(jobs)
    assert [j["micro_steps"] for j in jobs[:3]] == [4, 2, 2]  # 512 tokens over B x 64
    assert jobs[2]["kind"] == "plain" and jobs[2]["switches"]["fused_adamw"]
    assert all(j["params"].run.timed_steps == p.evidence.recipe_timed_steps for j in jobs)


def test_the_recipe_sides_are_measured_in_one_run(tmp_path, monkeypatch):
    """A side kept from an earlier run (another machine, maybe) is never compared with a side measured
    now: where any side must be measured, every side is measured again; where all are kept, none is."""
    p = tiny_params(batch_sizes=(2, 4))
    p.depth = "full"  # every side, the harness's too
    best = {"stage": "vocab", "batch_size": 2}
    monkeypatch.setattr(recipe, "recipe_config", lambda params, report_dir: best)
    monkeypatch.setattr(recipe.runner, "environment", lambda report_dir: {"device": {"backend": "cpu"}})
    jobs = recipe.recipe_jobs(p, tmp_path, best)
    calls = []

    def measure_jobs(js, env, force=False):
        calls.append(({j["variant"] for j in js}, force))
        return {j["out"]: {"variant": j["variant"], "tokens_per_s": 1000.0} for j in js}

    monkeypatch.setattr(recipe.runner, "measure_jobs", measure_jobs)
    kept = {j["out"] for j in jobs if j["variant"] != "recipe: baseline"}  # the plain loop's side changed
    monkeypatch.setattr(recipe.runner, "reusable", lambda out, fp: {"ok": 1} if str(out) in kept else None)
    recipe.measure(p, tmp_path, best)
    assert calls[0] == ({"recipe: recommended", "recipe: baseline-harness", "recipe: baseline"}, True)
    assert calls[1][1] is True  # the second round of processes too
    assert calls[2][1] is False  # the ablation's processes are compared one by one, never forced
    calls.clear()
    kept = {j["out"] for j in jobs}
    recipe.measure(p, tmp_path, best)
    assert calls[0][1] is False
    # a call cut off after the first process of this sitting: resumed, the rest is measured, the first kept
    calls.clear()
    kept = {jobs[0]["out"]}
    here = {"provenance": recipe.provenance.run_stamp({"device": {"backend": "cpu"}})}
    monkeypatch.setattr(recipe.runner, "reusable", lambda out, fp: here if str(out) in kept else None)
    recipe.measure(p, tmp_path, best)
    assert calls[0][1] is False


def test_the_recipe_runs_a_third_round_only_where_two_processes_disagree(tmp_path, monkeypatch):
    """Two processes a side always; a third round only when a side's two differ by more than
    evidence.repeat_tolerance (the repeats' rule), so agreeing sides cost two processes, not three."""
    p = tiny_params(batch_sizes=(2, 4))
    p.evidence.repeats, p.evidence.repeat_tolerance = 3, 0.01
    best = {"stage": "vocab", "batch_size": 2}
    monkeypatch.setattr(recipe, "recipe_config", lambda params, report_dir: best)
    monkeypatch.setattr(recipe.runner, "environment", lambda report_dir: {"device": {"backend": "cpu"}})
    monkeypatch.setattr(recipe.runner, "reusable", lambda out, fp: None)
    for second, rounds in ((1005.0, [0, 1]), (1020.0, [0, 1, 2])):  # 0.5 % apart, then 2 %
        seen = []

        def measure_jobs(js, env, force=False, second=second):
            recipe_js = [j for j in js if j.get("variant", "").startswith("recipe")]
            seen.extend(sorted({j["repeat"] for j in recipe_js}))
            return {
                j["out"]: {"variant": j["variant"], "tokens_per_s": second if j["repeat"] else 1000.0}
                for j in recipe_js
            }

        monkeypatch.setattr(recipe.runner, "measure_jobs", measure_jobs)
        recipe.measure(p, tmp_path, best)
        assert seen == rounds


def test_ablation_worth_is_the_ratio_of_throughputs(tmp_path):
    p = tiny_params()
    full = make_record(p, "fused", 2, times_ms=[100.0] * 5, losses=[5.0] * 6)  # 1,280 tok/s
    # Two more processes of the recommendation: the worth is taken against the median (1,280 tok/s)
    # and a lever inside their 2 % spread is "within noise".
    repeats = [{**full, "variant": "repeat", "tokens_per_s": tps} for tps in (1254.4, 1292.8)]
    without = []
    for lever, ms, status in (
        ("fused AdamW", [125.0] * 5, "ok"),
        ("SDPA attention", None, "oom"),
        ("TF32", [101.0] * 5, "ok"),
    ):
        r = make_record(
            p,
            "fused",
            2,
            times_ms=ms,
            losses=[5.0] * 6 if ms else None,
            status=status,
            reason=None if ms else "out of memory",
        )
        r.update(variant=f"without {lever}", lever=lever, mem_allocator_bytes=r.get("mem_allocator_bytes") or 2**30)
        without.append(r)
    rep = type(
        "Rep",
        (),
        {
            "evidence": {"ablation": without, "sweep": []},
            "rec": lambda self, s, b: full,
            "decisions": [full, *repeats],
            "params": p,
            "best": property(lambda self: decide.recommended(self.decisions, self.params)),
            # what decisions.compute keeps of the leave-one-out, from the records as they are
            "decided": property(
                lambda self: {
                    "leave_one_out_twin": None,
                    "leave_one_out": leave_one_out.kept(
                        leave_one_out.leave_one_out(self.decisions, self.evidence["ablation"])
                    ),
                }
            ),
        },
    )()
    got_full, rows = ablation_view.ablation_rows(rep)
    assert got_full["processes"]["n"] == 3 and got_full["processes"]["median"] == pytest.approx(1280.0)
    assert rows[0]["worth"] == pytest.approx(0.25) and rows[1]["worth"] is None
    assert rows[2]["worth"] == pytest.approx(0.01) and rows[2]["within_noise"] and not rows[0]["within_noise"]
    html = ablation_view.ablation_html(rep)
    assert "+25.0 %" in html and "does not fit at this batch without it" in html
    assert html.count(" at failure") == 1  # the OOM row's allocator peak is where it failed (a reviewer misread it)
    assert "+1.0 % (within noise)" in html and "1,280 (median of 3 processes)" in html
    # The fused stage's other levers were never run: each is a row that says so, not a silent gap.
    missing = [r["lever"] for r in rows if r["record"]["status"] == "not_measured"]
    assert missing == ["BF16 autocast", "padded vocabulary"]
    assert "NOT MEASURED" in html and "not run was predicted" not in html
    # A removal the matrix predicted would not fit: a short cell (its whole reason widened the table past an H100
    # report's page) and the note says what such a row means.
    reason = f"{record.PREDICTED_OOM}: in the matrix this lever made B=2 fit (Flash attention (SDPA) ran there, ...)"
    predicted = make_record(p, "fused", 2, None, None, status="not_applicable", reason=reason)
    rep.evidence["ablation"] = [*without, {**predicted, "variant": "without BF16 autocast"}]
    html = ablation_view.ablation_html(rep)
    assert "NOT RUN" in html and "predicted not to fit at this batch without it" in html and reason not in html
    assert "A row not run was predicted not to fit" in html


def test_a_library_lever_is_judged_against_the_stage_it_is_added_to(tmp_path):
    """fused_ce follows fp8 and fp8_torchao in the registry but is added to compile: its speed-up,
    memory change and recommended switches all read against compile, never against FP8."""
    from conftest import write_report_dir

    p = tiny_params(batch_sizes=(2,))
    keys = ["fp32", "vocab", "compile", "fp8", "fused_ce"]
    p.stages = keys
    ms = {"fp32": 400.0, "vocab": 200.0, "compile": 100.0, "fp8": 120.0, "fused_ce": 80.0}
    gib = {"fp32": 20, "vocab": 16, "compile": 10, "fp8": 5, "fused_ce": 8}
    recs = [make_record(p, k, 2, times_ms=[ms[k]] * 5, losses=[5.0] * 6, mem_bytes=gib[k] * 2**30) for k in keys]
    for r in recs:
        r["mem_allocator_bytes"] = r["mem_device_bytes"]
    rep = loader.load(write_report_dir(tmp_path / "rep", p, recs))
    assert rep.df.set_index("stage").loc["fused_ce", "speedup_vs_previous"] == pytest.approx(100 / 80)
    assert prose.memory_change(rep, "fused_ce") == "process peak memory -20.0 % at B=2 (10.00 → 8.00 GiB)"
    assert decide.lineage("fused_ce") == ["fp32", "tf32", "bf16", "flash", "vocab", "fused", "compile", "fused_ce"]
    md = batch_sweep_view.recommended_md(rep)
    assert md.startswith("**Fused linear cross-entropy") and "fp8.convert_linears" not in md


def test_the_recipe_says_how_each_side_was_timed(tmp_path):
    """Issue 33: 'what it buys' set the harness's median step against the plain loop's wall-clock mean and did not
    say so. The recipe's table now names both bases (page 1's line: tests/test_summary_box.py)."""
    p = tiny_params(["fp32", "vocab"])
    d = write_report_dir(tmp_path / "rep", p, [make_record(p, k, 2, [100.0] * 5, [5.0] * 6) for k in p.stages])
    for role, tps in (("recommended", 10.0), ("baseline", 8.0)):
        rec = make_record(p, "vocab", 2, [100.0] * 5, [5.0] * 6) | {"variant": f"recipe: {role}", "tokens_per_s": tps}
        store.write_atomic(d / "results" / "recipe" / f"{role}__vocab__b2__r0.json", rec)
    assert frontier_view.RECIPE_BASIS in frontier_view.recipe_html(loader.load(d))


def test_a_side_left_to_full_depth_is_not_shown_from_another_runs_record():
    """A folder measured at full depth and resumed at the default keeps the harness side's old records; the recipe
    table shows only the sides this depth measured, so no row joins another run's processes."""

    def rec(role, tps):
        return {"variant": f"recipe: {role}", "status": "ok", "stage": "vocab", "batch_size": 2, "tokens_per_s": tps}

    from lib.results import recipe_decision

    p = tiny_params()
    recipe = [rec("recommended", 10.0), rec("baseline-harness", 8.0), rec("baseline", 8.1)]

    def rows():  # the sides as the decisions hold them, laid out
        return [r["role"] for r in recipe_decision.side_rows({"sides": recipe_decision.recipe_sides(recipe, p)})]

    assert rows() == ["recommended", "baseline"]
    p.depth = "full"
    assert rows() == ["recommended", "baseline-harness", "baseline"]


def test_the_recipe_note_calls_a_difference_a_tie_only_where_the_tie_rule_chose(monkeypatch):
    """Seen on an H100 probe: the recipe ran at B=64 while the recommendation was B=96 (which does not divide the
    global batch); a resumed run moved the recommendation to B=128, and the note said B=128 'was preferred to the
    faster one for its memory, within noise', though it was the faster one and used more memory."""
    from types import SimpleNamespace

    p = tiny_params()
    p.evidence.global_batch_tokens = 4 * p.run.seq_len * 2

    def rec(role, tps, batch):
        return {
            "variant": f"recipe: {role}",
            "status": "ok",
            "stage": "vocab",
            "batch_size": batch,
            "tokens_per_s": tps,
            "micro_steps": p.evidence.global_batch_tokens // (batch * p.run.seq_len),
        }

    from lib.results import recipe_decision

    sides = recipe_decision.recipe_sides([rec("recommended", 10.0, 2), rec("baseline", 8.0, 2)], p)
    rep = SimpleNamespace(params=p, decided={"recipe": {"sides": sides}})
    moved = {"stage": "vocab", "batch_size": 4, "chosen_over": None}
    monkeypatch.setattr(frontier_view, "recommended", lambda rep: moved)
    assert "it speaks for its own configuration only" in frontier_view.recipe_html(rep)
    monkeypatch.setattr(frontier_view, "recommended", lambda rep: {**moved, "batch_size": 2})
    assert "its own configuration only" not in frontier_view.recipe_html(rep)


def test_a_leave_one_out_row_that_is_a_stage_timed_in_the_matrix_measures_the_drift_between_them():
    """reports/h200-x2: "without the loss-only forward" is the BF16 residual stream's configuration, timed in the
    matrix at 549,088 tokens/s and in the leave-one-out at 555,566 (1.2 % apart, against a 0.86 % floor between
    processes run back to back). That gap is the noise a worth is judged against; a row with no twin gives none."""
    from lib.results import noise

    tps = {("bf16_residual", 64): [549_088.0], ("loss_only", 64): [566_930.0, 568_808.0]}
    twin = {
        "stage": "loss_only",
        "batch_size": 64,
        "status": "ok",
        "tokens_per_s": 555_566.0,
        "stage_overrides": {"return_logits": True},
        "variant": "without loss-only forward",
    }
    other = {**twin, "stage_overrides": {"fused_adamw": False}, "tokens_per_s": 562_250.0, "variant": "without fused"}
    drift = noise.twin_drift([other, twin], tps)
    assert drift["stage"] == "bf16_residual" and abs(drift["gap"] - 555_566 / 549_088 + 1) < 1e-12
    assert noise.twin_drift([other], tps) is None
    full = tps[("loss_only", 64)]
    worth = lambda r: sum(full) / 2 / r["tokens_per_s"] - 1  # noqa: E731
    assert 0.0086 < worth(other) < 0.0118  # +1.0 %: beyond the floor alone, within the measured drift
    assert noise.within_noise(full, [other["tokens_per_s"]], 0.0086, 0.0) is False
    assert noise.within_noise(full, [other["tokens_per_s"]], 0.0086, drift["gap"]) is True
    # judged once, in the decisions, against the process-to-process spread of the same throughputs
    judged = decisions.ablation_twin([other, twin], tps, noise.noise_floor(tps))
    assert judged["floor"] == noise.noise_floor(tps) and judged["within_floor"] is False
    assert decisions.ablation_twin([other], tps, noise.noise_floor(tps)) is None
    apart = {**drift, "floor": 0.0086, "within_floor": False}
    assert "1.18 % apart" in ablation_view.twin_note(apart) and ablation_view.twin_note(None) == ""
    assert "(0.86 %) does not cover" in ablation_view.twin_note(apart)
    # reports/h200: 0.57 % apart against a 0.60 % spread, and the note said the spread did not cover it
    within = {**drift, "floor": 0.015, "within_floor": True}
    assert "within the process-to-process spread (1.50 %)" in ablation_view.twin_note(within)


def test_a_lever_that_made_the_batch_fit_in_the_matrix_is_not_removed_in_a_process_that_would_run_out_of_memory(
    tmp_path, monkeypatch
):
    """Seen on an H100 (reports/probes/warm-h100-2026-11-26): the ablation's run without SDPA attention at B=64
    compiled for 36 s and ran out of memory, as the matrix's BF16 stage (the last without SDPA) had at B=64 while the
    flash stage ran there. Such a lever is now written as predicted out of memory, with why, and no process runs;
    a lever whose own stage also ran out of memory there (TF32: for want of SDPA) is still measured."""
    from conftest import write_report_dir

    p = tiny_params(["fp32", "tf32", "bf16", "flash", "vocab"], batch_sizes=(4,))
    losses = [5.0] * 6
    matrix = [make_record(p, "fp32", 4, None, None, status="oom", reason="out of memory")]
    matrix += [make_record(p, k, 4, None, None, status="oom", reason="out of memory") for k in ("tf32", "bf16")]
    matrix += [make_record(p, k, 4, [50.0] * 5, losses) for k in ("flash", "vocab")]
    d = write_report_dir(tmp_path / "cpu", p, matrix)
    monkeypatch.setattr(recipe.runner, "environment", lambda report_dir: {"device": {"backend": "cpu"}})
    jobs = {j["variant"]: j for j in recipe.ablation_jobs(p, d, {"stage": "vocab", "batch_size": 4})}
    sdpa = jobs["without SDPA attention"]["not_applicable"]
    assert sdpa.startswith(record.PREDICTED_OOM) and "this lever made B=4 fit" in sdpa
    assert "Flash attention (SDPA) ran there, BF16 autocast ran out of memory" in sdpa
    assert all(j.get("not_applicable") is None for v, j in jobs.items() if v != "without SDPA attention"), jobs
    # At a batch below the one it made fit, nothing is predicted; the runner writes the prediction as a record.
    assert recipe.ablation_jobs(p, d, {"stage": "vocab", "batch_size": 2})[2].get("not_applicable") is None
    monkeypatch.setattr(recipe.runner, "_launcher", lambda env: pytest.fail("no process for a predicted OOM"))
    rec = recipe.runner.measure_jobs([jobs["without SDPA attention"]], {"device": {"backend": "cpu"}})
    assert [r["status"] for r in rec.values()] == [record.Status.NOT_APPLICABLE]


def test_a_leave_one_out_row_belongs_to_the_stage_that_adds_its_lever_even_where_two_share_a_switch():
    """The FP8 classifier and cut-cross-entropy both set `loss`: the classifier's row was read as cut-cross-entropy's
    (the first stage whose loss differed from the stage before it), so page 1 would have put the classifier's worth
    on the wrong line had it been recommended. The row now goes where levers.introduced_by puts it, the rule the
    ablation's runs use; every other lever lands where it did."""
    expected = {
        "FP8 classifier (fused)": "fp8_classifier",
        "fused linear cross-entropy": "fused_ce",
        "padded vocabulary (and FP8 classifier (fused), which needs it)": "vocab",
        "BF16 autocast (and BF16 residual stream, which needs it)": "bf16",
        "SDPA attention": "flash",
        "torch.compile": "compile",
        "FP8 lm_head (torchao)": "fp8_head",
        "loss-only forward": "loss_only",
        "not a lever": None,
    }
    chain = [stages.get(k) for k in stages.ORDER]
    assert {lever: getattr(levers.introduced_by(lever, chain), "key", None) for lever in expected} == expected


def test_the_leave_one_out_switches_levers_off_from_the_recipe_as_timed(tmp_path, monkeypatch):
    """reports/h200 of 25022d9 timed the recipe with the FP8 classifier (its long test admitted it) and ran the
    leave-one-out around the loss-only forward, the short tests' recommendation: the classifier had no part."""
    p = tiny_params(batch_sizes=(2, 4))
    best, pick = {"stage": "vocab", "batch_size": 2}, {"stage": "fused", "batch_size": 2}
    monkeypatch.setattr(recipe, "recipe_config", lambda params, report_dir: pick)
    monkeypatch.setattr(recipe.runner, "environment", lambda report_dir: {"device": {"backend": "cpu"}})
    monkeypatch.setattr(recipe.runner, "measure_jobs", lambda js, env, force=False: {})
    monkeypatch.setattr(recipe.runner, "reusable", lambda out, fp: None)
    around = []
    monkeypatch.setattr(recipe, "ablation_jobs", lambda params, report_dir, b: around.append(b) or [])
    recipe.measure(p, tmp_path, best)
    assert around == [pick]
