"""Where and how a record was measured: the code's commit (and whether the tree differed from it),
a host identity that is not the hostname, the GPU's UUID and the software. The runner stamps every
record with its run's stamp; store.write_record refuses a record without one, so no unstamped
record can reach a report. The machine a record came from is read back here too."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from pathlib import Path

from lib.core.paths import ROOT

# The measuring code: what a commit must cover for a record to be reproducible from it.
CODE_FOLDERS = ("lib", "params")
REQUIRED = ("commit", "modified", "host_id", "gpu_uuid", "software")  # every record's provenance has these keys
SOFTWARE_KEYS = ("torch", "cuda", "hip", "cudnn", "cublas", "driver", "python")


class UnstampedRecord(ValueError):
    """A record that does not say where and how it was measured."""


def tree_hash(root: Path = ROOT) -> str:
    """A hash of the measuring code's files (CODE_FOLDERS, tracked or not, no caches): what a copy of
    the tree without .git can still prove about itself."""
    digest = hashlib.sha256()
    for folder in CODE_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".yaml", ".css"):
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def code_version() -> dict:
    """The commit of the measuring code and whether the tree differed from it. A GPU host often
    gets a copy of the tree without .git: GPT2_LEVERS_COMMIT then names the commit, and
    GPT2_LEVERS_TREE (`python -m lib.core.provenance`, run where the commit is checked out) lets the copy
    prove it is unmodified: its own tree hash must equal the one given."""
    here = tree_hash()
    given = os.environ.get("GPT2_LEVERS_COMMIT")
    if given:
        expected = os.environ.get("GPT2_LEVERS_TREE")
        return {
            "commit": given,
            "modified": None if not expected else here != expected,
            "tree_hash": here,
            "source": "GPT2_LEVERS_COMMIT" + (" and GPT2_LEVERS_TREE" if expected else " (tree not checked)"),
        }

    def git(*args):
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
        return out.stdout.strip() if out.returncode == 0 else None

    try:
        commit = git("rev-parse", "HEAD")
        modified = bool(git("status", "--porcelain", "--", *CODE_FOLDERS)) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit = modified = None
    if not commit:
        return {"commit": None, "modified": None, "tree_hash": here, "source": "no .git and GPT2_LEVERS_COMMIT unset"}
    return {"commit": commit, "modified": modified, "tree_hash": here, "source": "git"}


# The code that builds and times one configuration's step: the model, the levers' kernels, the worker and its clocks.
STEP_CODE = ("lib/train", "lib/measure")


@functools.lru_cache(maxsize=32)
def measuring_changes(a: str, b: str, root: Path = ROOT) -> tuple[str, ...] | None:
    """The files of the measuring code (CODE_FOLDERS) that differ between commits a and b, by git; None where git
    cannot tell (no .git here, or a commit this clone does not have). Cached: a comparison asks once a table."""
    try:
        out = subprocess.run(
            ["git", "diff", "--name-only", a, b, "--", *CODE_FOLDERS],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return tuple(out.stdout.split()) if out.returncode == 0 else None


def host_id() -> str:
    """A hash that names this host and boot without naming it: machine-id, boot id and hostname.
    A new virtual machine from the same image has another boot id, so it is another host."""
    parts = []
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            parts.append(Path(path).read_text().strip())
        except OSError:
            parts.append("")
    parts.append(os.uname().nodename)
    return "host-" + hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]


def run_stamp(env: dict) -> dict:
    """The provenance every record of this run carries (the clocks and power are the record's own)."""
    code = code_version()
    dev = env.get("device") or {}
    return {
        "commit": code["commit"],
        "modified": code["modified"],
        "tree_hash": code["tree_hash"],
        "commit_source": code["source"],
        "host_id": env.get("host_id") or host_id(),
        "gpu_uuid": dev.get("uuid") if dev.get("backend") in ("cuda", "rocm") else None,
        "device": dev.get("name"),
        "software": {k: env.get(k) for k in SOFTWARE_KEYS if env.get(k) is not None}
        | {"packages": env.get("packages") or {}},
    }


def check(rec: dict) -> None:
    """Raise UnstampedRecord unless `rec` says where and how it was measured."""
    stamp = rec.get("provenance")
    missing = [k for k in REQUIRED if not isinstance(stamp, dict) or k not in stamp]
    if missing:
        raise UnstampedRecord(
            f"record {rec.get('stage')} B={rec.get('batch_size')} has no provenance "
            f"({', '.join(missing)} missing): the runner stamps every record before it is written"
        )
    if rec.get("status") in ("ok", "diverged") and rec.get("kind") in (None, "plain") and "clocks" not in rec:
        raise UnstampedRecord(
            f"timed record {rec.get('stage')} B={rec.get('batch_size')} has no clocks and power of its timed steps"
        )


def machine_of(rec: dict) -> str:
    """The machine a record was measured on (host and GPU), or 'unrecorded' for records made before
    records were stamped."""
    stamp = rec.get("provenance") or {}
    if not stamp.get("host_id"):
        return "unrecorded"
    return stamp["host_id"] + (f" / {stamp['gpu_uuid']}" if stamp.get("gpu_uuid") else "")


SITTING_KEYS = ("commit", "modified", "tree_hash", "host_id", "gpu_uuid")


def same_sitting(rec: dict, stamp: dict) -> bool:
    """Whether `rec` was measured by the code and on the machine that `stamp` (run_stamp) names: a run
    resumed there, not another one."""
    mine = rec.get("provenance") or {}
    return all(mine.get(k) == stamp.get(k) for k in SITTING_KEYS) and stamp.get("host_id") is not None


def commit_of(rec: dict) -> str:
    stamp = rec.get("provenance") or {}
    return (stamp.get("commit") or "unrecorded")[:12] + ("+modified" if stamp.get("modified") else "")


if __name__ == "__main__":
    print(tree_hash())
