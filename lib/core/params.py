"""The parameters of a report as typed dataclasses: the schema every params file is checked against, and
the object every layer reads (params.run.seq_len). lib/core/config.py merges the files into one; a
report's params.json is its to_dict(), read back with from_dict(lenient=True)."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(ValueError):
    pass


@dataclass
class ModelParams:
    n_layer: int  # the shape: from the preset (params/models.yaml)
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    padded_vocab_size: int


SHAPE = ("n_layer", "n_head", "n_embd")  # what a preset fixes (the vocabulary and context are the profile's)


@dataclass
class RunParams:
    seq_len: int
    batch_sizes: list[int]
    warmup_steps: int
    timed_steps: int
    seed: int
    learning_rate: float
    weight_decay: float
    grad_clip: float
    loss_tolerance: float
    final_loss_window: int


@dataclass
class Baseline:
    stage: str
    batch_size: int


@dataclass
class SizeSweep:
    presets: list[str]
    batch_size: int
    warmup_steps: int
    timed_steps: int
    fp8_stages: list[str]
    repeats: int = 1  # processes a point


@dataclass
class Evidence:
    seq_lens: list[int]
    seq_tokens: int
    seq_warmup_steps: int
    seq_timed_steps: int
    gemm_batch: int
    sweep_batch_sizes: list[int]
    repeats: int
    repeat_tolerance: float
    crosscheck_batch: int
    parity_steps: int
    parity_passes: float
    parity_seeds: int
    parity_margin: float
    parity_confidence: float
    parity_power: float
    held_out_batches: int
    global_batch_tokens: int
    recipe_warmup_steps: int
    recipe_timed_steps: int
    baseline: Baseline
    size_sweep: SizeSweep
    parity_futility_trend: bool = False  # the futility stop by the seeds' trend too (False: a folder measured before)
    batch_min_gain: float | None = None  # a batch size must be faster by more than this to beat a smaller (None: noise)
    parity_chain_batch: bool = False  # a stage that takes over is tested at the rejected test's batch (False: its own)
    parity_before_sweep: bool = False  # a stage is tested at the matrix's batch before it is swept (False: swept first)
    parity_batch: int | None = None  # sequences per optimizer step of every test, each side in micro-batches that fit
    # The quality test's sequential design: the seeds at which the test looks, and the tokens each run trains on (the
    # horizon). None only in the params.json of a folder measured under an earlier rule, which the report refuses
    parity_looks: list[int] | None = None
    parity_horizon_tokens: int | None = None
    claim_repeat_margin: float | None = None  # a timing claim's sides repeat only where its verdict could move within
    # this many noise floors of its figure (None: always)
    token_budget: int | None = None  # tokens a team trains on: the recipe's hours and cost are quoted for it
    check_stage: str | None = None  # a pipeline check (the CPU default): the one stage recommended, whatever its noise
    sweep_oom_margin: float | None = None  # predicted memory beyond the device's by this fraction: not swept


@dataclass
class FullDepth:
    stages: list[str] = field(default_factory=list)
    chapters: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)  # names in config.DEPTH_EVIDENCE


@dataclass
class Params:
    # --- from the files (params/default.yaml under params/<profile>.yaml)
    model: ModelParams
    run: RunParams
    stages: list[str]
    evidence: Evidence
    backend: str
    description: str = ""
    peak_source: str | None = None
    full_depth: FullDepth = field(default_factory=FullDepth)  # measured only with DEPTH=full or when named
    cost_model_s: dict = field(default_factory=dict)  # the progress line's estimate of a chapter no run timed
    skip: dict | None = None  # stage -> why this profile does not measure it (the report shows the reason)
    match: list[str] | None = None
    gpus: int | None = None  # a host variant (params/h200-x2.yaml): fits only a host with this many GPUs
    family: str | None = None
    peak_tflops: dict | None = None
    price_per_gpu_hour: float | None = None  # the report adds the cost per million tokens (else energy only)
    # --- set by config.load, never by a file
    name: str = ""
    model_preset: str | None = None
    profile_preset: str | None = None
    depth: str = "default"
    chapters: list[str] | None = None  # the chapters beyond the stages; None (not recorded then): all of them
    override: str | None = None
    method: int = 1  # a report from before the method was recorded measured with method 1
    not_run: list[dict] = field(default_factory=list)  # what DEPTH=full would add, with its command

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def micro_steps(self, batch: int) -> int | None:
        """Gradient-accumulation steps that make `batch` sequences per micro-step reach the global batch
        (evidence.global_batch_tokens), or None when the global batch is not a multiple of the micro-batch's
        tokens: the recipe measures there, and the report says why it does not measure elsewhere."""
        tokens, per_micro = self.evidence.global_batch_tokens, batch * self.run.seq_len
        return tokens // per_micro if tokens and tokens % per_micro == 0 else None

    @classmethod
    def from_dict(cls, data: dict, where: str = "params", lenient: bool = False) -> Params:
        """The params of a merged dict (config.load) or of a report's params.json (lenient: a report from
        an earlier version may lack keys, read as None, and carry keys since retired, dropped)."""
        return build(cls, data, where, lenient)

    @classmethod
    def read(cls, path) -> Params:
        """A report's params.json, as written by an earlier version of this tool too."""
        return cls.from_dict(json.loads(Path(path).read_text()), str(path), lenient=True)


DERIVED = ("name", "model_preset", "profile_preset", "depth", "chapters", "override", "method", "not_run")
# The keys a params file may set to null, meaning "none" (no peaks, no match, nothing skipped, no price, no
# per-preset batches); a null anywhere else is an error, whatever the field's type allows once loaded.
NULL_IN_FILES = ("peak_tflops", "match", "gpus", "skip", "price_per_gpu_hour", "models")


def _parts(hint) -> tuple[type, bool]:
    """(the type, whether null is allowed) of a field's annotation."""
    args, null_ok = typing.get_args(hint), False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint, null_ok = next(a for a in args if a is not type(None)), type(None) in args
    return typing.get_origin(hint) or hint, null_ok


def file_schema(cls=Params) -> dict:
    """What a params file may hold: key -> (type, null allowed), or -> a nested schema for a section. Not
    what config.load derives, nor the model's shape (the preset's); but the model's preset, and a
    profile's batch sizes per preset (`models`), which load() folds into the rest."""
    out = {}
    for name, hint in typing.get_type_hints(cls).items():
        kind, _ = _parts(hint)
        if cls is Params and name in DERIVED or cls is ModelParams and name in SHAPE:
            continue
        out[name] = file_schema(kind) if dataclasses.is_dataclass(kind) else (kind, name in NULL_IN_FILES)
    if cls is Params:
        out["model"] = {"preset": (str, False), **out["model"]}
        out["models"] = (dict, "models" in NULL_IN_FILES)
    return out


def check_type(value, expected: type, key: str, where, null_ok: bool = False) -> None:
    """One line naming the key when `value` is not of the `expected` type."""
    if value is None:
        if not null_ok:
            raise ConfigError(f"{where}: {key!r} must be {expected.__name__}, got null")
        return
    if expected is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, expected)
    if not ok:
        raise ConfigError(f"{where}: {key!r} must be {expected.__name__}, got {value!r}")


def build(cls, data: dict, where: str, lenient: bool = False):
    """An instance of dataclass `cls` from `data`, every key known, present and of its type (lenient:
    unknown keys dropped, missing ones None unless the field has a default, types trusted)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping")
    hints, fields = typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in hints]
    if unknown and not lenient:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(hints)})")
    required = [k for k, f in fields.items() if f.default is dataclasses.MISSING is f.default_factory]
    missing = [k for k in required if k not in data]
    if missing and not lenient:
        raise ConfigError(f"{where} is missing {', '.join(missing)}")
    values = {k: None for k in missing}
    for key in (k for k in hints if k in data):
        kind, null_ok = _parts(hints[key])
        value = data[key]
        if dataclasses.is_dataclass(kind) and value is not None:
            values[key] = build(kind, value, f"{where}: {key}", lenient)
            continue
        if not lenient:
            check_type(value, kind, key, where, null_ok)
        values[key] = value
    return cls(**values)
