"""The price per GPU-hour a report's cost is stated at, and where it comes from: the team's own (PRICE_PER_GPU_HOUR=
when rendering, else price_per_gpu_hour in its profile), else params/prices.yaml's list price for the profile's device.
A price is no measurement: it is read when the report is drawn, so a committed report takes a new one without
measuring again."""

from __future__ import annotations

import re

import yaml

from lib.core import cli_args
from lib.core.paths import PARAMS as PARAMS_DIR

FILE = PARAMS_DIR / "prices.yaml"
GIVEN = "stated by the team (PRICE_PER_GPU_HOUR= or the profile's price_per_gpu_hour)"


def listed(profile: str) -> dict | None:
    """{usd, source} of params/prices.yaml for `profile`'s device (a host variant h200-x4 reads h200's), or None."""
    table = yaml.safe_load(FILE.read_text()) or {}
    entry = table.get(profile) or table.get(re.sub(r"-x\d+$", "", profile))
    if entry is None:
        return None
    usd = cli_args.parse_price(str(entry.get("usd")))
    if not entry.get("source"):
        raise ValueError(f"{FILE.name}: {profile!r} has a price but names no source")
    return {"usd": usd, "source": entry["source"]}


def stated(profile: str, from_env: str | None, from_profile: float | None) -> dict | None:
    """The price a report states its cost at: {usd, source}, the team's own first; None where none is known."""
    own = cli_args.parse_price(from_env) or from_profile
    return {"usd": own, "source": GIVEN} if own else listed(profile)
