"""Parameters as data: params/default.yaml overlaid by params/<profile>.yaml, validated against the
typed params (lib/core/params.py) and the rules below, into one Params.

Every bad input becomes a ConfigError whose message is one line naming the offending value;
the CLI prints it and exits non-zero before anything is measured."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

import yaml

from lib.core import evidence_check, record, stages
from lib.core.evidence_check import MIN_TIMED_STEPS, positive_ints
from lib.core.params import SHAPE, ConfigError, Params, check_type, file_schema
from lib.core.paths import PARAMS as PARAMS_DIR
from lib.core.paths import ROOT

NAME_RE = re.compile(r"^[a-z0-9_-]+$")

# What a preset of params/models.yaml holds: key -> (type, null allowed), as params.file_schema gives them.
PRESET_KEYS = {**{k: (int, False) for k in SHAPE}, "batch_sizes": (list, False), "sweep_batch_sizes": (list, False)}
BACKENDS = ("cuda", "rocm", "mps", "cpu")
# Chip families: a claim about one (params/claims.yaml) speaks about every profile of it (H100 and
# H200 are both GH100, Hopper). A profile names its family (`family:`; a profile without one is in none).
FAMILIES = ("ampere", "hopper", "blackwell", "cdna3", "apple", "cpu")


class UsageError(ConfigError):
    """A bad input not in a params file (device, reports folder, missing report); shown like a ConfigError."""


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
    """The chip family of profile `name`; None for none or no profile (a synthetic report): no claim speaks of it."""
    path = PARAMS_DIR / f"{name}.yaml"
    family = _family_of(path, path.stat().st_mtime_ns) if name in profiles() else None
    return None if family is None else check_family(family, f"params/{name}.yaml")


@functools.lru_cache(maxsize=None)
def _family_of(path: Path, mtime_ns: int) -> str | None:
    """A profile's family as its file reads at that modification time: every claim of every report asks for every
    profile's (a render parsed the params files 308 times), and the files change only between runs."""
    return _read(path).get("family")


def profiles() -> list[str]:
    not_profiles = ("default", "claims", "rules", "models", "prices")
    return sorted(p.stem for p in PARAMS_DIR.glob("*.yaml") if p.stem not in not_profiles)


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


def preset_of(params: Params) -> str:
    """The preset a report was measured at: recorded in its params, or (a report from before presets
    were recorded) the preset of the same shape; 'custom' for a shape that is none of them."""
    if params.model_preset:
        return params.model_preset
    shape = {k: getattr(params.model, k) for k in SHAPE}
    return next((n for n, p in presets().items() if {k: p[k] for k in SHAPE} == shape), "custom")


def report_name(profile: str, preset: str) -> str:
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
    _check_keys(data, file_schema(), path.relative_to(ROOT))
    return data


def _check_keys(data: dict, schema: dict, where) -> None:
    """A params file's keys against `schema` (params.file_schema): a file may leave any key to another."""
    for key, value in data.items():
        if key not in schema:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(schema)})")
        if isinstance(schema[key], dict) and not isinstance(value, dict):
            raise ConfigError(f"{where}: {key!r} must be a mapping")
        if isinstance(schema[key], dict):
            _check_keys(value, schema[key], f"{where}: {key}")
        else:
            check_type(value, schema[key][0], key, where, schema[key][1])  # (type, null allowed)


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


DEPTHS = ("default", "full")
# Evidence that explains a chapter but decides nothing: by default only where full_depth.evidence leaves it in.
DEPTH_EVIDENCE = {
    "ce_filter": "cut-cross-entropy's default gradient filter (fused cross-entropy chapter)",
    "shape_padding_control": "torch.compile at 50257 with Inductor's shape padding off (compile chapter's control)",
    "recipe_harness": "the canonical trainer's configuration in this harness at the global batch (recipe)",
    "compiled_small_batches": "the compiled stages at the matrix's smaller batch sizes (each lever is decided at the "
    "largest batch it and its previous stage ran; a compile costs the same at any batch)",
    "seq_curve": "naive attention against SDPA across sequence lengths (flash attention chapter)",
    "parity_alternatives": "the quality tests of the other levers on the stack the report fell back to, where the "
    "fastest lever did not hold against it (the default recommends that stack, checked against the canonical "
    "reference, and leaves them 'not yet')",
}
# The chapter whose `CHAPTERS=` adds the evidence; None: it spans chapters, and DEPTH=full alone adds it.
EVIDENCE_CHAPTER = {
    "ce_filter": "fused_ce",
    "shape_padding_control": "compile",
    "recipe_harness": "batch_sweep",
    "compiled_small_batches": None,
    "seq_curve": "flash",
    "parity_alternatives": "batch_sweep",
}


def check_depth(depth: str | None) -> str:
    if depth not in (None, "", *DEPTHS):
        raise UsageError(f"unknown DEPTH={depth!r} (depths: {', '.join(DEPTHS)})")
    return depth or "default"


def not_run(params: Params) -> list[dict]:
    """What this report leaves to DEPTH=full (stages, chapters, evidence), each with the command that adds it."""
    again = f"make report GPU={params.name}" + (
        f" MODEL={params.model_preset}" if params.model_preset != params.profile_preset else ""
    )
    return (
        [
            {"key": k, "kind": "stage", "command": f"{again} DEPTH=full CHAPTERS={k}"}
            for k in params.full_depth.stages
            if k not in params.stages
        ]
        + [
            {"key": k, "kind": "chapter", "command": f"{again} CHAPTERS={k}"}
            for k in params.full_depth.chapters
            if k not in (params.chapters or [])
        ]
        + [
            {
                "key": k,
                "kind": "evidence",
                "command": f"{again} DEPTH=full" + (f" CHAPTERS={EVIDENCE_CHAPTER[k]}" if EVIDENCE_CHAPTER[k] else ""),
                "what": DEPTH_EVIDENCE[k],
            }
            for k in params.full_depth.evidence
            if not runs_evidence(params, k) and _leaves_out(params, k)
        ]
    )


def _leaves_out(params: Params, name: str) -> bool:
    """Whether leaving evidence `name` out leaves anything out: its chapter (a compiled stage, several batches) runs."""
    if name == "compiled_small_batches":
        return len(params.run.batch_sizes) > 1 and any(stages.get(k).compile for k in params.stages)
    if name == "parity_alternatives":  # two levers added to one stack: one may be left untested beside the other
        own = [stages.own_stack(k) for k in stages.single_gpu(params.stages)]
        return len(own) > len(set(own)) and _has_chapter(params, EVIDENCE_CHAPTER[name])
    return _has_chapter(params, EVIDENCE_CHAPTER[name])


def stage_batches(params: Params, key: str) -> list[int]:
    """The matrix's batch sizes for stage `key`: a compiled one at the largest alone without compiled_small_batches."""
    sizes = params.run.batch_sizes
    if stages.get(key).compile and not runs_evidence(params, "compiled_small_batches"):
        return [max(sizes)]
    return list(sizes)


def _has_chapter(params: Params, key: str) -> bool:
    """Whether this report measures chapter `key` at all (a stage it runs and does not skip, or a later chapter)."""
    return (key in params.stages and key not in (params.skip or {})) or key in (params.chapters or [])


def runs_evidence(params: Params, name: str) -> bool:
    """Whether this report measures evidence `name` (DEPTH_EVIDENCE): at full depth, or not left to it."""
    if name not in DEPTH_EVIDENCE:
        raise KeyError(f"{name!r} is no depth evidence ({', '.join(DEPTH_EVIDENCE)})")
    return params.depth == "full" or name not in params.full_depth.evidence


def load(
    profile: str,
    batch_sizes: list[int] | None = None,
    override: str | None = None,
    stage_keys: list[str] | None = None,
    model: str | None = None,
    depth: str | None = None,
) -> Params:
    """The merged, validated parameters for `profile`, with `name` set to it, at the preset `model`
    (None: the profile's own). Batch sizes come from the preset, then the profile, then the
    profile's entry for the preset. `override`, when the profile runs on a device it does not name,
    is kept so the report can say so."""
    check_name(profile)
    path = PARAMS_DIR / f"{profile}.yaml"
    where = str(path.relative_to(ROOT))
    if not path.exists():
        raise ConfigError(f"unknown GPU profile {profile!r} (profiles: {', '.join(profiles())})")
    default, own = _read(PARAMS_DIR / "default.yaml"), _read(path)
    own_preset = _merge(default, own)["model"]["preset"]
    name = check_model(model) if model else own_preset
    if name not in presets():
        raise ConfigError(
            f"{where}: model.preset {name!r} is none of params/models.yaml's presets ({', '.join(presets())})"
        )
    preset = presets()[name]
    merged = _merge(
        default,
        {"run": {"batch_sizes": preset["batch_sizes"]}, "evidence": {"sweep_batch_sizes": preset["sweep_batch_sizes"]}},
    )
    merged = _merge(merged, {k: v for k, v in own.items() if k != "models"})
    for other in own.get("models") or {}:
        if other not in presets():
            raise ConfigError(f"{where}: models: {other!r} is no preset ({', '.join(presets())})")
    mine = (own.get("models") or {}).get(name) or {}
    _check_keys(mine, {"batch_sizes": (list, False), "sweep_batch_sizes": (list, False)}, f"{where}: models: {name}")
    merged["run"]["batch_sizes"] = mine.get("batch_sizes", merged["run"].get("batch_sizes"))
    merged["evidence"]["sweep_batch_sizes"] = mine.get("sweep_batch_sizes", merged["evidence"]["sweep_batch_sizes"])
    # The shape joins the model's keys, so fingerprints cover it; the preset's name stays outside (presets()).
    merged["model"] = {**{k: preset[k] for k in SHAPE}, **{k: v for k, v in merged["model"].items() if k != "preset"}}
    params = Params.from_dict(merged, where)
    if batch_sizes is not None:
        params.run.batch_sizes = batch_sizes
    depth = check_depth(depth)
    if stage_keys is not None:  # a subset of the profile's stages; the first one is the baseline
        params.stages = stage_keys
    elif depth == "default":  # depth runs when asked (DEPTH=full) or named (STAGES=, CHAPTERS=)
        params.stages = [k for k in params.stages if k not in params.full_depth.stages]
    params.chapters = [k for k in stages.BEYOND_STAGES if depth == "full" or k not in params.full_depth.chapters]
    params.name, params.model_preset, params.profile_preset, params.depth = profile, name, own_preset, depth
    params.override, params.method = override, record.METHOD
    params.not_run = not_run(params)
    validate(params)
    return params


def validate(p: Params) -> None:
    """The rules a key's type does not say: ranges, shapes that fit, names that exist."""
    where = f"params/{p.name}.yaml"
    m, r, ev = p.model, p.run, p.evidence
    for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "padded_vocab_size"):
        if getattr(m, key) <= 0:
            raise ConfigError(f"{where}: model.{key} must be a positive integer, got {getattr(m, key)}")
    if m.n_embd % m.n_head:
        raise ConfigError(f"{where}: model.n_embd {m.n_embd} is not divisible by n_head {m.n_head}")
    if m.padded_vocab_size < m.vocab_size:
        raise ConfigError(f"{where}: model.padded_vocab_size must be >= vocab_size")
    for b in r.batch_sizes:
        if not positive_ints([b]):
            raise ConfigError(f"{where}: batch size {b!r} is not a positive integer")
    if not r.batch_sizes:
        raise ConfigError(f"{where}: run.batch_sizes is empty")
    for key in ("seq_len", "warmup_steps", "timed_steps", "final_loss_window"):
        if getattr(r, key) < (0 if key == "warmup_steps" else 1):
            kind = "a non-negative" if key == "warmup_steps" else "a positive"
            raise ConfigError(f"{where}: run.{key} must be {kind} integer, got {getattr(r, key)}")
    if r.timed_steps < MIN_TIMED_STEPS:
        raise ConfigError(
            f"{where}: run.timed_steps {r.timed_steps} is too few for p10/p90 statistics (at least {MIN_TIMED_STEPS})"
        )
    if r.seq_len > m.block_size:
        raise ConfigError(f"{where}: run.seq_len {r.seq_len} exceeds model.block_size {m.block_size}")
    if p.backend not in BACKENDS:
        raise ConfigError(f"{where}: backend must be one of {', '.join(BACKENDS)}, got {p.backend!r}")
    if p.family is not None:
        check_family(p.family, where)
    for s in p.stages:
        if s not in stages.STAGES:
            raise ConfigError(f"{where}: unknown stage {s!r} (stages: {', '.join(stages.ORDER)})")
    for s, why in (p.skip or {}).items():
        if s not in stages.STAGES or not isinstance(why, str) or not why.strip():
            raise ConfigError(f"{where}: skip: {s!r} must name a stage and give the reason as text")
    for name in p.full_depth.evidence:
        if name not in DEPTH_EVIDENCE:
            raise ConfigError(f"{where}: full_depth.evidence: {name!r} is unknown (known: {', '.join(DEPTH_EVIDENCE)})")
    evidence_check.validate(ev, where, presets())


def profile_fits(name: str, device_name: str, backend: str, count: int = 1) -> bool:
    """Whether profile `name` fits the device: backend, a `match` string in its name, a host variant's GPU count."""
    data = _read(PARAMS_DIR / f"{check_profile(name)}.yaml")
    return (
        data.get("backend") == backend
        and any(p.lower() in device_name.lower() for p in data.get("match") or [])
        and data.get("gpus") in (None, count)
    )


def match_profile(device_name: str, backend: str, count: int = 1) -> str | None:
    """The profile fitting the device best: the longest `match` string in its name; of equal ones, a
    host variant naming this host's GPU count (params/h200-x2.yaml) over the plain profile."""
    if backend == "cpu":
        return "cpu"
    ranks = {
        (len(p), data.get("gpus") is not None): name
        for name in profiles()
        if profile_fits(name, device_name, backend, count)
        for data in [_read(PARAMS_DIR / f"{name}.yaml")]
        for p in data.get("match") or []
        if p.lower() in device_name.lower()
    }
    return ranks[max(ranks)] if ranks else None
