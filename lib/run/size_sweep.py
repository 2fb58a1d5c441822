"""*What the size-sweep chapter measures*: at every model preset of evidence.size_sweep, the
recommended configuration without FP8 and with each FP8 form the profile lists, one fresh process
a point, at one batch size that fits every preset (results/size/). A lever's worth depends on the
shape of the work: FP8's casts cost in proportion to the activations (d) while its GEMMs save in
proportion to d², so whether FP8 pays is a question of size, which this chapter answers from
measurements.

Without FP8 is the recommendation with its FP8 switches off (on a device where FP8 lost, the
recommendation itself); each FP8 form adds one FP8 stage's switch to it, so every form is judged
against the same configuration."""

from __future__ import annotations

import copy
import dataclasses

from lib.core import config, stages
from lib.core.params import SHAPE, ModelParams, Params
from lib.core.paths import resolve
from lib.results import decide, store
from lib.run import runner
from lib.run.jobs import folder, make_job

WITHOUT_FP8 = stages.WITHOUT_FP8  # the variant of each preset's reference point
FP32_STATE_BYTES = 16  # per parameter: fp32 weights, gradients and AdamW's two moments


def _stage_like(stage) -> str | None:
    """The registry's stage with exactly `stage`'s switches, if there is one (the record then names
    that stage rather than a stage with overrides)."""

    def switches(s):
        return {k: v for k, v in s.identity().items() if k not in ("key", "peak")}

    return next((k for k, s in stages.STAGES.items() if switches(s) == switches(stage)), None)


def _config(stage, fallback: str, overrides: dict, variant: str, like: str) -> dict:
    same = _stage_like(stage)
    return {
        "stage": same or fallback,
        "overrides": None if same else overrides or None,
        "variant": variant,
        "like": like,
    }


def plan(params: Params, recommended: str) -> list[dict]:
    """The configurations each preset runs: [{stage, overrides, variant, like}], where `like` is the
    stage whose device needs (backends, capability, package) decide whether it can run here. The
    recommendation is among them: without FP8 when it has none, else as one of the FP8 forms (or
    added as its own when the profile's forms do not include it)."""
    rec = stages.get(recommended)
    off = {s: stages.DEFAULTS[s] for s in stages.fp8_switches(rec)}
    base = dataclasses.replace(rec, **off)
    out = [_config(base, recommended, off, WITHOUT_FP8, recommended)]
    out[0]["like"] = out[0]["stage"]
    for key in params.evidence.size_sweep.fp8_stages:
        switches = stages.fp8_switches(stages.get(key))
        form = dataclasses.replace(base, **switches)
        out.append(
            _config(form, out[0]["stage"], {**(out[0]["overrides"] or {}), **switches}, stages.get(key).title, key)
        )
    if off and not any(c["stage"] == recommended and not c["overrides"] for c in out):
        out.append({"stage": recommended, "overrides": None, "variant": rec.title, "like": recommended})
    return out


def n_params(model: ModelParams) -> int:
    """The parameter count of the model `model` (params' shape) at the padded vocabulary: the
    blocks (attention and MLP weights and biases, two LayerNorms), the embeddings and ln_f; the
    lm_head shares the token embedding, as in GPT-2."""
    d, layers = model.n_embd, model.n_layer
    return layers * (12 * d * d + 13 * d) + (model.padded_vocab_size + model.block_size) * d + 2 * d


def does_not_fit(model: ModelParams, device: dict) -> str | None:
    """Why a preset cannot train on `device` whatever the batch: its fp32 weights, gradients and
    AdamW moments alone exceed the device's memory. None when it may fit (an OOM then stays a row)."""
    total, need = device.get("memory_bytes"), FP32_STATE_BYTES * n_params(model)
    if not total or need <= total:
        return None
    return (
        f"does not fit: its fp32 weights, gradients and AdamW moments alone need {need / 1e9:.1f} GB, "
        f"the device has {total / 1e9:.1f} GB"
    )


def preset_params(params: Params, name: str) -> Params:
    """The report's params at preset `name`, with the size sweep's step counts."""
    sweep, p = params.evidence.size_sweep, copy.deepcopy(params)
    p.model = dataclasses.replace(p.model, **{k: config.presets()[name][k] for k in SHAPE})
    p.model_preset = name
    p.run.warmup_steps, p.run.timed_steps = sweep.warmup_steps, sweep.timed_steps
    return p


def jobs(params: Params, report_dir, recommended: str) -> list[dict]:
    """Every preset's configurations in one process each, then (evidence.size_sweep.repeats) the
    further processes that measure each point's spread, so a call cut short has the whole curve first."""
    sweep = params.evidence.size_sweep
    first = [_jobs(params, report_dir, recommended, name, 0) for name in sweep.presets]
    again = [_jobs(params, report_dir, recommended, name, k) for k in range(1, sweep.repeats) for name in sweep.presets]
    return [j for js in first + again for j in js]


def _jobs(params: Params, report_dir, recommended: str, name: str, repeat: int) -> list[dict]:
    env, sweep = runner.environment(report_dir), params.evidence.size_sweep
    skip, b, out = params.skip or {}, sweep.batch_size, []
    p = preset_params(params, name)
    fit = does_not_fit(p.model, env["device"])
    for c in plan(params, recommended):
        stage = dataclasses.replace(stages.get(c["stage"]), **(c["overrides"] or {}))
        skipped = next(
            (f"not measured by the {params.name} profile: {skip[k]}" for k in (c["stage"], c["like"]) if k in skip),
            None,
        )
        reason = (
            fit or skipped or stages.get(c["like"]).not_applicable(env["device"]) or stage.not_applicable(env["device"])
        )
        name_of = (
            c["stage"] + (f"+{c['like']}" if c["overrides"] else "") + f"__b{b}" + (f"__r{repeat}" if repeat else "")
        )
        job = make_job(
            p,
            env,
            c["stage"],
            b,
            folder(report_dir, "size") / f"{name}__{name_of}.json",
            variant=c["variant"],
            stage_overrides=c["overrides"],
            energy=False,
            repeat=repeat,
            profile=c["variant"] == WITHOUT_FP8 and not repeat,
        )  # where its step time goes, once a preset
        job["fingerprint"] += f"-r{repeat}" if repeat else ""
        job["not_applicable"] = reason
        out.append(job)
    return out


def measure(params: Params, report_dir, force: bool = False) -> list[dict]:
    """Every preset's configurations, smallest preset first (a host short of time has the small
    end of the curve). Nothing before the batch-size sweep has chosen a recommendation."""
    best = decide.recommended(store.decision_records(resolve(report_dir) / "results"), params)
    if best is None:
        return []
    todo = jobs(params, report_dir, best["stage"])
    recs = runner.measure_jobs(todo, runner.environment(report_dir), force=force)
    return [recs[j["out"]] for j in todo if j["out"] in recs]
