"""Parameters as data: params/default.yaml overlaid by params/<profile>.yaml, validated.

Every bad input becomes a ConfigError whose message is one line naming the offending value;
the CLI prints it and exits non-zero before anything is measured."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

from lib.core import record, stages
from lib.core.paths import PARAMS as PARAMS_DIR
from lib.core.paths import ROOT

NAME_RE = re.compile(r"^[a-z0-9_-]+$")

# The schema: section -> {key: type}. Anything else in a YAML file is an error, so a typo
# never silently falls back to a default.
SCHEMA = {
    "model": {"preset": str, "block_size": int, "vocab_size": int, "padded_vocab_size": int},
    "run": {
        "seq_len": int,
        "batch_sizes": list,
        "warmup_steps": int,
        "timed_steps": int,
        "seed": int,
        "learning_rate": float,
        "weight_decay": float,
        "grad_clip": float,
        "loss_tolerance": float,
        "final_loss_window": int,
    },
    "stages": list,
    "evidence": {
        "seq_lens": list,
        "seq_tokens": int,
        "seq_warmup_steps": int,
        "seq_timed_steps": int,
        "gemm_batch": int,
        "sweep_batch_sizes": list,
        "repeats": int,
        "crosscheck_batch": int,
        "parity_steps": int,
        "held_out_batches": int,
        "global_batch_tokens": int,
        "recipe_warmup_steps": int,
        "recipe_timed_steps": int,
        "baseline": dict,
        "size_sweep": dict,
        "repeat_tolerance": float,
        **dict.fromkeys(("parity_passes", "parity_margin", "parity_confidence", "parity_power"), float),
        "parity_seeds": int,
    },
    "full_depth": {"stages": list, "chapters": list},  # measured only with DEPTH=full or when named
    "cost_model_s": dict,  # the progress line's estimate of a chapter no earlier run timed
    "skip": dict,  # stage -> why this profile does not measure it (the report shows the reason)
    "description": str,
    "match": list,
    "backend": str,
    "family": str,
    "peak_tflops": dict,
    "peak_source": str,
    "price_per_gpu_hour": float,  # optional: the report adds the cost per million tokens (else energy only)
    "models": dict,  # optional: preset -> {batch_sizes, sweep_batch_sizes} this device uses instead of the preset's
}
SHAPE = ("n_layer", "n_head", "n_embd")  # what a preset fixes (the vocabulary and context are the profile's)
PRESET_KEYS = {**{k: int for k in SHAPE}, "batch_sizes": list, "sweep_batch_sizes": list}
SIZE_SWEEP_KEYS = {
    "presets": list,
    "batch_size": int,
    "warmup_steps": int,
    "timed_steps": int,
    "fp8_stages": list,
    "repeats": int,
}  # repeats: optional, processes a point (default 1)
BACKENDS = ("cuda", "rocm", "mps", "cpu")
# Chip families: a claim about one (params/claims.yaml) speaks about every profile of it (H100 and
# H200 are both GH100, Hopper). A profile names its family (`family:`; a profile without one is in none).
FAMILIES = ("ampere", "hopper", "blackwell", "cdna3", "apple", "cpu")
NULLABLE = ("peak_tflops", "match", "skip", "price_per_gpu_hour", "models")  # null means "none" for these keys only
MIN_TIMED_STEPS = 5  # fewer cannot give a meaningful p10/p90


class ConfigError(ValueError):
    pass


class UsageError(ConfigError):
    """A bad input that is not in a params file: a device that does not fit, a busy or unwritable
    reports folder, a missing report. Shown like a ConfigError: one line, exit code 2."""


def check_profile(name: str) -> str:
    check_name(name)
    if name not in profiles():
        raise ConfigError(f"unknown GPU profile {name!r} (profiles: {', '.join(profiles())})")
    return name


def profile_backend(name: str) -> str | None:
    return _read(PARAMS_DIR / f"{check_profile(name)}.yaml").get("backend")


def check_family(family, where) -> str:
    if family not in FAMILIES:
        raise ConfigError(f"{where}: family {family!r} is not a known chip family (families: {', '.join(FAMILIES)})")
    return family


def profile_family(name: str) -> str | None:
    """The chip family of profile `name`; None for a profile that names none or a name that is no
    profile (a synthetic report): no family claim speaks about it."""
    family = _read(PARAMS_DIR / f"{name}.yaml").get("family") if name in profiles() else None
    return None if family is None else check_family(family, f"params/{name}.yaml")


def profiles() -> list[str]:
    return sorted(p.stem for p in PARAMS_DIR.glob("*.yaml") if p.stem not in ("default", "claims", "rules", "models"))


def presets() -> dict[str, dict]:
    """params/models.yaml: preset name -> its shape and batch sizes, validated."""
    data = yaml.safe_load((PARAMS_DIR / "models.yaml").read_text()) or {}
    out = data.get("presets") or {}
    for name, preset in out.items():
        _check_keys(preset, PRESET_KEYS, f"params/models.yaml: {name}")
        missing = [k for k in PRESET_KEYS if k not in preset]
        if missing:
            raise ConfigError(f"params/models.yaml: {name} is missing {', '.join(missing)}")
    shapes = [tuple(p[k] for k in SHAPE) for p in out.values()]
    if len(set(shapes)) != len(shapes):
        raise ConfigError("params/models.yaml: two presets share a shape (a report's preset is known by its shape)")
    return out


def check_model(name: str) -> str:
    """MODEL=<name>: a preset of params/models.yaml, else an error that lists them."""
    if name not in presets():
        raise UsageError(f"unknown MODEL {name!r} (presets: {', '.join(presets())})")
    return name


def preset_of(params: dict) -> str:
    """The preset a report was measured at: recorded in its params, or (a report from before presets
    were recorded) the preset of the same shape; 'custom' for a shape that is none of them."""
    if params.get("model_preset"):
        return params["model_preset"]
    shape = {k: params["model"].get(k) for k in SHAPE}
    return next((n for n, p in presets().items() if {k: p[k] for k in SHAPE} == shape), "custom")


def report_name(profile: str, preset: str, params: dict | None = None) -> str:
    """The report folder's name: the profile's alone at its own default preset (reports/h100), the
    profile and the preset otherwise (reports/h100-gpt2-xl), so another size never replaces it."""
    default = _merge(_read(PARAMS_DIR / "default.yaml"), _read(PARAMS_DIR / f"{check_profile(profile)}.yaml"))
    return profile if preset == default["model"]["preset"] else f"{profile}-{preset}"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError(f"GPU name {name!r} may only use a-z, 0-9, '_' and '-' (profiles: {', '.join(profiles())})")
    return name


def _read(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path.relative_to(ROOT)}: malformed YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path.relative_to(ROOT)}: expected a mapping at the top level")
    _check_keys(data, SCHEMA, path.relative_to(ROOT))
    return data


def _check_keys(data: dict, schema: dict, where) -> None:
    for key, value in data.items():
        if key not in schema:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(schema)})")
        expected = schema[key]
        if isinstance(expected, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: {key!r} must be a mapping")
            _check_keys(value, expected, f"{where}: {key}")
        elif value is None and key not in NULLABLE:
            raise ConfigError(f"{where}: {key!r} must be {expected.__name__}, got null")
        elif value is not None and not _is(value, expected):
            raise ConfigError(f"{where}: {key!r} must be {expected.__name__}, got {value!r}")


def _is(value, expected) -> bool:
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


DEPTHS = ("default", "full")


def check_depth(depth: str | None) -> str:
    if depth not in (None, "", *DEPTHS):
        raise UsageError(f"unknown DEPTH={depth!r} (depths: {', '.join(DEPTHS)})")
    return depth or "default"


def not_run(params: dict) -> list[dict]:
    """What this report leaves to DEPTH=full (stages and chapters not in it), each with the command that adds it."""
    full, again = (
        params.get("full_depth") or {},
        f"make report GPU={params['name']}"
        + (f" MODEL={params['model_preset']}" if params.get("model_preset") != params.get("profile_preset") else ""),
    )
    return [
        {"key": k, "kind": "stage", "command": f"{again} DEPTH=full CHAPTERS={k}"}
        for k in full.get("stages", [])
        if k not in params["stages"]
    ] + [
        {"key": k, "kind": "chapter", "command": f"{again} CHAPTERS={k}"}
        for k in full.get("chapters", [])
        if k not in (params.get("chapters") or [])
    ]


def load(
    profile: str,
    batch_sizes: list[int] | None = None,
    override: str | None = None,
    stage_keys: list[str] | None = None,
    model: str | None = None,
    depth: str | None = None,
) -> dict:
    """The merged, validated parameters for `profile`, with `name` set to it, at the preset `model`
    (None: the profile's own). Batch sizes come from the preset, then the profile, then the
    profile's entry for the preset. `override`, when the profile runs on a device it does not name,
    is kept so the report can say so."""
    check_name(profile)
    path = PARAMS_DIR / f"{profile}.yaml"
    if not path.exists():
        raise ConfigError(f"unknown GPU profile {profile!r} (profiles: {', '.join(profiles())})")
    default, own = _read(PARAMS_DIR / "default.yaml"), _read(path)
    own_preset = _merge(default, own)["model"]["preset"]
    name = check_model(model) if model else own_preset
    if name not in presets():
        raise ConfigError(
            f"{path.relative_to(ROOT)}: model.preset {name!r} is none of params/models.yaml's presets "
            f"({', '.join(presets())})"
        )
    preset = presets()[name]
    params = _merge(
        default,
        {"run": {"batch_sizes": preset["batch_sizes"]}, "evidence": {"sweep_batch_sizes": preset["sweep_batch_sizes"]}},
    )
    params = _merge(params, {k: v for k, v in own.items() if k != "models"})
    for other in own.get("models") or {}:
        if other not in presets():
            raise ConfigError(f"{path.relative_to(ROOT)}: models: {other!r} is no preset ({', '.join(presets())})")
    mine = (own.get("models") or {}).get(name) or {}
    _check_keys(mine, {"batch_sizes": list, "sweep_batch_sizes": list}, f"{path.relative_to(ROOT)}: models: {name}")
    params["run"]["batch_sizes"] = mine.get("batch_sizes", params["run"]["batch_sizes"])
    params["evidence"]["sweep_batch_sizes"] = mine.get("sweep_batch_sizes", params["evidence"]["sweep_batch_sizes"])
    # The shape joins the model's other keys, so every fingerprint (store.setup_key) covers it; the
    # name is recorded beside them, outside the fingerprint: no two presets share a shape (presets()).
    del params["model"]["preset"]
    params["model"] = {**{k: preset[k] for k in SHAPE}, **params["model"]}
    params["model_preset"] = name
    if batch_sizes is not None:
        params["run"]["batch_sizes"] = batch_sizes
    depth = check_depth(depth)
    full = params.get("full_depth") or {}
    if stage_keys is not None:  # a subset of the profile's stages; the first one is the baseline
        params["stages"] = stage_keys
    elif depth == "default":  # depth runs when asked (DEPTH=full) or named (STAGES=, CHAPTERS=)
        params["stages"] = [k for k in params["stages"] if k not in full.get("stages", [])]
    params["chapters"] = [k for k in stages.BEYOND_STAGES if depth == "full" or k not in full.get("chapters", [])]
    params.update(depth=depth, profile_preset=own_preset, name=profile)
    params["override"] = override
    params["method"] = record.METHOD
    params["not_run"] = not_run(params)
    validate(params)
    return params


def validate(p: dict) -> None:
    where = f"params/{p['name']}.yaml"
    for section, keys in (("model", [*SHAPE, *(k for k in SCHEMA["model"] if k != "preset")]), ("run", SCHEMA["run"])):
        missing = [k for k in keys if k not in p.get(section, {})]
        if missing:
            raise ConfigError(f"{where}: {section} is missing {', '.join(missing)}")
    m, r = p["model"], p["run"]
    for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "padded_vocab_size"):
        if m[key] <= 0:
            raise ConfigError(f"{where}: model.{key} must be a positive integer, got {m[key]}")
    if m["n_embd"] % m["n_head"]:
        raise ConfigError(f"{where}: model.n_embd {m['n_embd']} is not divisible by n_head {m['n_head']}")
    if m["padded_vocab_size"] < m["vocab_size"]:
        raise ConfigError(f"{where}: model.padded_vocab_size must be >= vocab_size")
    for b in r["batch_sizes"]:
        if not _is(b, int) or b <= 0:
            raise ConfigError(f"{where}: batch size {b!r} is not a positive integer")
    if not r["batch_sizes"]:
        raise ConfigError(f"{where}: run.batch_sizes is empty")
    for key in ("seq_len", "warmup_steps", "timed_steps", "final_loss_window"):
        if r[key] < (0 if key == "warmup_steps" else 1):
            kind = "a non-negative" if key == "warmup_steps" else "a positive"
            raise ConfigError(f"{where}: run.{key} must be {kind} integer, got {r[key]}")
    if r["timed_steps"] < MIN_TIMED_STEPS:
        raise ConfigError(
            f"{where}: run.timed_steps {r['timed_steps']} is too few for p10/p90 "
            f"statistics (at least {MIN_TIMED_STEPS})"
        )
    if r["seq_len"] > m["block_size"]:
        raise ConfigError(f"{where}: run.seq_len {r['seq_len']} exceeds model.block_size {m['block_size']}")
    if p.get("backend") not in BACKENDS:
        raise ConfigError(f"{where}: backend must be one of {', '.join(BACKENDS)}, got {p.get('backend')!r}")
    if p.get("family") is not None:
        check_family(p["family"], where)
    for s in p["stages"]:
        if s not in stages.STAGES:
            raise ConfigError(f"{where}: unknown stage {s!r} (stages: {', '.join(stages.ORDER)})")
    for s, why in (p.get("skip") or {}).items():
        if s not in stages.STAGES or not isinstance(why, str) or not why.strip():
            raise ConfigError(f"{where}: skip: {s!r} must name a stage and give the reason as text")
    ev = p.get("evidence")
    if ev is None:
        raise ConfigError(f"{where}: the evidence section is missing")
    missing = [k for k in SCHEMA["evidence"] if k not in ev]
    if missing:
        raise ConfigError(f"{where}: evidence is missing {', '.join(missing)}")
    for key in ("seq_lens", "sweep_batch_sizes"):
        if not ev[key] or any(not _is(v, int) or v <= 0 for v in ev[key]):
            raise ConfigError(f"{where}: evidence.{key} must be a non-empty list of positive integers, got {ev[key]!r}")
    for key in (
        "seq_tokens",
        "gemm_batch",
        "seq_timed_steps",
        "repeats",
        "crosscheck_batch",
        "parity_steps",
        "held_out_batches",
        "parity_passes",
        "parity_margin",
    ):
        if ev[key] <= 0:
            raise ConfigError(f"{where}: evidence.{key} must be positive, got {ev[key]}")
    if ev["parity_seeds"] < 2 or not (0 < ev["parity_confidence"] < 1 and 0 < ev["parity_power"] < 1):
        raise ConfigError(
            f"{where}: evidence.parity_seeds must be at least 2, parity_confidence and parity_power in (0, 1)"
        )
    if ev["seq_timed_steps"] < MIN_TIMED_STEPS:
        raise ConfigError(
            f"{where}: evidence.seq_timed_steps {ev['seq_timed_steps']} is too few for p10/p90 "
            f"statistics (at least {MIN_TIMED_STEPS})"
        )
    if ev["seq_warmup_steps"] < 0:
        raise ConfigError(f"{where}: evidence.seq_warmup_steps must be a non-negative integer")
    if ev["global_batch_tokens"] <= 0 or ev["recipe_warmup_steps"] < 1 or ev["recipe_timed_steps"] < MIN_TIMED_STEPS:
        raise ConfigError(
            f"{where}: evidence.global_batch_tokens must be positive, recipe_warmup_steps at least 1 "
            f"and recipe_timed_steps at least {MIN_TIMED_STEPS}"
        )
    size = ev.get("size_sweep") or {}
    _check_keys(size, SIZE_SWEEP_KEYS, f"{where}: evidence.size_sweep")
    if (
        set(size) | {"repeats"} != set(SIZE_SWEEP_KEYS)
        or not size["presets"]
        or size.get("repeats", 1) < 1
        or size["batch_size"] <= 0
        or size["warmup_steps"] < 1
        or size["timed_steps"] < MIN_TIMED_STEPS
    ):
        raise ConfigError(
            f"{where}: evidence.size_sweep needs presets (a non-empty list), a positive batch_size, "
            f"warmup_steps at least 1 and timed_steps at least {MIN_TIMED_STEPS}, got {size!r}"
        )
    for name in size["presets"]:
        if name not in presets():
            raise ConfigError(f"{where}: evidence.size_sweep: {name!r} is no preset ({', '.join(presets())})")
    fp8 = [k for k in stages.ORDER if stages.fp8_switches(stages.STAGES[k])]
    for key in size["fp8_stages"]:
        if key not in fp8:
            raise ConfigError(f"{where}: evidence.size_sweep.fp8_stages: {key!r} is no FP8 stage ({', '.join(fp8)})")
    base = ev["baseline"]
    if base.get("stage") not in stages.STAGES or not _is(base.get("batch_size"), int) or base["batch_size"] <= 0:
        raise ConfigError(f"{where}: evidence.baseline must name a stage and a positive batch_size, got {base!r}")


def match_profile(device_name: str, backend: str) -> str | None:
    """The profile whose `match` strings fit the device name best (longest match wins)."""
    if backend == "cpu":
        return "cpu"
    best, best_len = None, 0
    for name in profiles():
        data = _read(PARAMS_DIR / f"{name}.yaml")
        if data.get("backend") != backend:
            continue
        for pattern in data.get("match") or []:
            if pattern.lower() in device_name.lower() and len(pattern) > best_len:
                best, best_len = name, len(pattern)
    return best
