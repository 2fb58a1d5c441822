"""The measured configuration for the GPU a training script runs on, never a guessed rule:

    from lib.optimal import optimal_config
    cfg = optimal_config()   # reports/<profile>/recommended.json of this device's profile

It matches the device to a profile as `make report` does, reads the recommendation that profile's
report measured, warns when this machine's software differs from the software it was measured with,
and raises NoReport, naming the command that measures it, where no report exists for the device."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from lib.core import config
from lib.core.paths import ROOT
from lib.results.recommendation import FILE

SKEW_KEYS = ("torch", "cuda", "cudnn", "cublas", "driver")


class NoReport(LookupError):
    """No measured recommendation for this device: measure it first."""


class VersionSkew(UserWarning):
    """This machine's software differs from what the recommendation was measured with."""


def _this_machine() -> dict:
    from lib.measure.environment import (
        capture,  # imported here: torch and the device only when asked
    )

    env = capture()
    return {**env["device"], **{k: env.get(k) for k in SKEW_KEYS}}


def optimal_config(device: dict | None = None, reports: str | Path | None = None, model: str | None = None) -> dict:
    """The recommended.json of the report measured for this device. `device`: a record with at least
    `name` and `backend` (and the SKEW_KEYS to check), by default this machine's; `reports`: the
    reports folder (default reports/); `model`: a preset of params/models.yaml (default: the profile's own)."""
    device = device or _this_machine()
    profile = config.match_profile(device["name"], device["backend"], device.get("count") or 1)
    if profile is None:
        raise NoReport(
            f"no profile matches the {device['backend']} device {device['name']!r}: add "
            "params/<name>.yaml with a `match` entry, then measure it first: make report GPU=<name>"
        )
    name = config.report_name(profile, config.check_model(model)) if model else profile
    path = (Path(reports) if reports else ROOT / "reports") / name / FILE
    if not path.is_file():
        again = f"GPU={profile}" + (f" MODEL={model}" if name != profile else "")
        raise NoReport(
            f"no measured recommendation for {device['name']} (profile {profile}"
            + (f", model {model}" if model else "")
            + f"): {path} does not exist; measure it first: "
            f"make report {again}"
        )
    rec = json.loads(path.read_text())
    measured = rec.get("software") or {}
    skew = [
        f"{k} {measured[k]} there, {device[k]} here"
        for k in SKEW_KEYS
        if device.get(k) is not None and measured.get(k) is not None and str(device[k]) != str(measured[k])
    ]
    if skew:
        warnings.warn(
            f"the recommendation for {profile} was measured with other software ({'; '.join(skew)}): "
            f"its numbers may not hold here; re-measure with make report GPU={profile}",
            VersionSkew,
            stacklevel=2,
        )
    return rec
