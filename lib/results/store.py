"""Result records on disk: where a record goes, its fingerprint (what it depends on), writing it
atomically once stamped, moving a superseded one aside, and reading a report's records back."""

from __future__ import annotations

import ast
import json
import os
import re
import tempfile
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path

import numpy as np

from lib.core import kernel_categories, provenance
from lib.core.record import SCHEMA_VERSION, Status
from lib.core.params import Params

ENV_KEYS = ("torch", "cuda", "hip", "cudnn", "cublas", "driver", "python")


def setup_key(params: Params, env: dict) -> dict:
    """What a measurement depends on: the workload and the machine (not the report's prose
    settings such as the loss tolerance)."""
    run = {k: v for k, v in asdict(params.run).items() if k not in ("batch_sizes", "loss_tolerance")}
    return {
        "method": params.method,
        "model": asdict(params.model),
        "run": run,
        "backend": params.backend,
        "device": env["device"].get("name"),
        **{k: env.get(k) for k in ENV_KEYS},
    }


def short_hash(obj) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=_plain).encode()).hexdigest()[:16]


def fingerprint(params: Params, env: dict, stage, batch: int) -> str:
    """What a measurement depends on: the workload, the machine, the stage's switches (not its
    prose: fixing a title re-measures nothing) and the batch size."""
    return short_hash({"setup": setup_key(params, env), "stage": stage.identity(), "batch_size": batch})


def base_record(params: Params, stage, batch: int) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "profile": params.name,
        "model": params.model_preset,
        "stage": stage.key,
        "stage_title": stage.title,
        "batch_size": batch,
        "seq_len": params.run.seq_len,
        "status": Status.OK,
        "reason": None,
        "warmup_steps": params.run.warmup_steps,
        "timed_steps": params.run.timed_steps,
        "peak_precision": stage.peak,
    }


def record_path(out_dir, stage: str, batch: int, gpus: int | None = None, nodes: int = 1) -> Path:
    """<stage>__b<batch>.json; a multi-GPU record adds its GPU count (__g<N>): hosts of 2, 4, 8 GPUs share a folder;
    a job over several nodes adds their number (__n<M>), beside the one-node record of as many GPUs."""
    return Path(out_dir) / (
        f"{stage}__b{batch}" + (f"__g{gpus}" if gpus else "") + (f"__n{nodes}" if nodes > 1 else "") + ".json"
    )


def write_atomic(path, record) -> None:
    """Write `record` (a dict, or the params) as JSON to a temporary file in the same folder, then rename:
    a reader (or a run killed half-way) never sees a half-written record."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1, default=jsonable)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(path, record: dict) -> None:
    """A result record, atomically, once it says where and how it was measured (provenance.check)."""
    provenance.check(record)
    write_atomic(path, record)


def supersede(out: Path) -> Path:
    """Move a record that is about to be measured again to <report>/superseded/ (its path under results/,
    stamped with the time): no record is ever deleted, and the report counts what was superseded."""
    parts = out.parts
    if "results" in parts:
        i = len(parts) - 1 - parts[::-1].index("results")
        dest = Path(*parts[:i]) / "superseded" / Path(*parts[i + 1 :])
    else:
        dest = out.parent / "superseded" / out.name
    dest = dest.with_name(f"{dest.stem}.{time.strftime('%Y%m%dT%H%M%S')}{dest.suffix}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    out.rename(dest)
    return dest


def code_hash(source: str) -> str:
    """A hash of what Python source does, not of how it is laid out: its syntax tree, so a comment or a
    reformatting leaves it (and every fingerprint or cache key it is part of) unchanged."""
    return short_hash(ast.dump(ast.parse(source)))


def _plain(v):
    """What a hash sees of a value JSON has no form for: a dataclass (the params) as its fields."""
    return asdict(v) if is_dataclass(v) else str(v)


def jsonable(v):
    """JSON's form of the params (a dataclass) and of numpy scalars: for records and job files."""
    if is_dataclass(v):
        return asdict(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    raise TypeError(f"not JSON serialisable: {type(v)}")


# What makes a record one of a run's: the code it ran (commit and tree) and the machine (not the GPU: a DDP
# record belongs to every GPU of its host).
RUN_KEYS = ("commit", "tree_hash", "host_id")


def run_stamps(report_dir) -> list[dict] | None:
    """The code and machine of every measuring run in a report's run.json (the program writes it, from the first
    configuration of a run on); None where there is none, or its runs predate stamping."""
    try:
        run = json.loads((Path(report_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return None
    stamps = [
        {**{k: (r.get("code") or {}).get(k) for k in ("commit", "tree_hash")}, "host_id": r["host_id"]}
        for r in [*run.get("earlier_runs", []), run]
        if r.get("host_id")
    ]
    return stamps or None


def of_its_runs(rec: dict, stamps: list[dict] | None) -> bool:
    """Whether a record was measured by one of its report's runs. A record in a report's folder that no run of
    run.json measured (a file restored or copied there from another sitting) is not part of the report: the
    measuring code never decides on it and the report leaves it out, saying so (strays). Unstamped records
    (older reports) and folders without a run.json are taken as they are."""
    mine = rec.get("provenance")
    return stamps is None or not mine or any(all(mine.get(k) == s.get(k) for k in RUN_KEYS) for s in stamps)


def report_of(results_dir) -> Path | None:
    """The report folder a results folder (or one of its kind folders) belongs to."""
    path = Path(results_dir).resolve()
    return next((p.parent for p in [path, *path.parents] if p.name == "results"), None)


def _read(path: Path) -> dict:
    rec = json.loads(path.read_text())
    if rec.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema version {rec.get('schema_version')}, this code reads {SCHEMA_VERSION}")
    return rec


def load_records(results_dir) -> list[dict]:
    """The records of one folder of a report's results/ that its runs measured (of_its_runs)."""
    report = report_of(results_dir)
    stamps = run_stamps(report) if report else None
    listed = (_read_if_there(path) for path in sorted(Path(results_dir).glob("*.json")))
    return [rec for rec in listed if rec is not None and of_its_runs(rec, stamps)]


def _read_if_there(path: Path) -> dict | None:
    """A listed record, or None where it was moved aside (supersede) after the listing: two nodes rehearsed on one
    host share a folder, and node 1 planning its job while node 0 superseded the two-node record failed, leaving
    node 0 at the rendezvous until it timed out (CI, stop 66)."""
    try:
        return _read(path)
    except FileNotFoundError:
        return None


def every_record(report_dir) -> tuple[list[tuple[Path, dict]], list[tuple[Path, dict]]]:
    """Every record under a report's results/ as (path, record): those its runs measured, and the strays,
    which none of them did (of_its_runs)."""
    stamps, mine, strays = run_stamps(report_dir), [], []
    for path in sorted((Path(report_dir) / "results").rglob("*.json")):
        rec = json.loads(path.read_text())  # as they are: page 1 counts every file, whatever its schema
        (mine if of_its_runs(rec, stamps) else strays).append((path, rec))
    return mine, strays


EVIDENCE_KINDS = (
    "seq",
    "gemm",
    "variants",
    "sweep",
    "repeats",
    "crosscheck",
    "parity",
    "sdpa",
    "recipe",
    "ablation",
    "size",
)  # folders of results/


LONG_FOLDER = "long"  # <report>/long/: the long quality test's own folder (python -m lib.run.long_test --folder)


def load_evidence(results_dir) -> dict:
    """Every evidence record of a report's results folder by kind, its kernel profiles read by
    today's rules; {"gemm": record or None, every other kind: [...]}; missing kinds are empty. 'long': the records of
    the long quality test run for this report, in <report>/long/ (its own command and params, not a sitting's)."""
    out = {}
    for kind in EVIDENCE_KINDS:
        recs = [kernel_categories.current(r) for r in load_records(Path(results_dir) / kind)]
        out[kind] = (recs[0] if recs else None) if kind == "gemm" else recs
    long = Path(results_dir).parent / LONG_FOLDER
    out["long"] = load_records(long / "results" / "long") if (long / "results" / "long").is_dir() else []
    # which lever was tested against which reference: the test's own verdict files name the pairs (a run of one
    # stage may serve as the reference of one test and the lever of another)
    out["long_pairs"] = sorted(
        tuple(m.groups())
        for f in long.glob("long-*-vs-*.json")
        if (m := re.fullmatch(r"long-(\w+)-vs-(\w+)\.json", f.name))
    )
    return out


def code_commits(run: dict | None) -> tuple[list[str], int]:
    """The measuring code's commits over every run that measured a report (run.json's account; distinct, oldest
    first) and how many of those runs recorded none (measured before commits were recorded)."""
    run = run or {}
    commits = [(r.get("code") or {}).get("commit") for r in [*run.get("earlier_runs", []), run] if r]
    return list(dict.fromkeys(c for c in commits if c)), sum(not c for c in commits)


def measured_seconds(run: dict | None) -> float | None:
    """Device time spent measuring a report (run.json's account), over every run that contributed to it."""
    run = run or {}
    totals = [(r.get("timings_s") or {}).get("total_s") for r in [*run.get("earlier_runs", []), run]]
    totals = [t for t in totals if t]
    return sum(totals) if totals else None


def records_digest(report_dir, *extra: str | None) -> str:
    """The sha256 of what a report's decisions are computed from: its params, environment, results and long test
    (every file, by name and bytes), and `extra` (what the render reads besides, e.g. a stated price). decisions.json
    carries it, so a notebook reads the decisions only while they are those of the folder as it is."""
    import hashlib

    d, h = Path(report_dir), hashlib.sha256()
    files = [d / "params.json", d / "environment.json"]
    files += sorted(p for top in ("results", LONG_FOLDER) for p in (d / top).rglob("*.json") if p.is_file())
    for p in files:
        if p.is_file():
            body = p.read_bytes()
            h.update(f"{p.relative_to(d)}\0{len(body)}\0".encode() + body)
    h.update(json.dumps(extra).encode())
    return h.hexdigest()


def decision_records(results_dir) -> list[dict]:
    """What the recommendation rests on: the matrix, the batch sweep, the repeats and the
    parity runs of one report's results folder."""
    base = Path(results_dir)
    return [r for d in (base, base / "sweep", base / "repeats", base / "parity") if d.is_dir() for r in load_records(d)]


def table_rows(df) -> list[dict]:
    """decide.table's rows as decisions.json keeps them: numpy's scalars as Python's, a missing value as None."""

    def plain(v):
        if isinstance(v, float | np.floating) and np.isnan(v):
            return None
        return v.item() if isinstance(v, np.generic) else v

    return [{k: plain(v) for k, v in row.items()} for row in df.to_dict("records")]
