"""The write-ups' claims and rule tables as data (params/claims.yaml, params/rules.yaml), validated
against the stages and chip families they speak about."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from lib.core.config import FAMILIES, PARAMS_DIR, ConfigError, check_family, profile_family, profiles

CLAIMS = PARAMS_DIR / "claims.yaml"
RULES = PARAMS_DIR / "rules.yaml"
# What params/claims.yaml may judge by (the header of that file says what each one measures).
METRICS = (
    "speedup",
    "time_change",
    "memory_change",
    "kernels",
    "misalignment",
    "alignment",
    "loss_gate",
    "attention",
    "none",
)
# A range of percentages in a quote (30-40 %, 15–20 %): the claim's range is closed, so a figure beyond it reads
# "exceeded" (a reviewer found 5.61x the time "confirmed" against "30-40 % slower", read as "at least 1.05x").
QUOTED_RANGE = re.compile(r"\d+(?:\.\d+)?\s*[-–]\s*\d+(?:\.\d+)?\s*%")


def load_claims(path=CLAIMS) -> dict:
    """The write-ups' claims (params/claims.yaml), each with a known metric, its source among the
    file's `sources`, the sentence it quotes and the chip families it speaks about; a claim this tool cannot check
    (metric none) says why, and a loss-gate claim is judged against its stage's own loss reference."""
    from lib.core import levers, stages

    from lib.core.kernel_categories import CATEGORIES

    data = yaml.safe_load(Path(path).read_text())
    # each source as what it is (`sources`, which params/rules.yaml names too), and each claim's as it cites it
    raw = data.get("sources", {})
    data["sources"] = {k: v["what"] for k, v in raw.items()}
    for c in data["claims"]:
        where = f"{path}: claim {c.get('id')!r}"
        if c.get("metric") not in METRICS:
            raise ConfigError(f"{where} has unknown metric {c.get('metric')!r}")
        if c.get("source") not in raw:
            raise ConfigError(f"{where} names no source among {', '.join(raw)}")
        c["cite"] = raw[c["source"]]["cite"]
        if not c.get("quote"):
            raise ConfigError(f"{where} quotes no sentence of its source (quote:)")
        if c.get("explain", CATEGORIES[0]) not in CATEGORIES:
            raise ConfigError(f"{where}: explain {c['explain']!r} is no kernel category ({', '.join(CATEGORIES)})")
        if not c.get("families"):
            raise ConfigError(f"{where} names no chip families (families: {', '.join(FAMILIES)})")
        for family in c["families"]:
            check_family(family, where)
        if c["metric"] == "none" and not c.get("reason"):
            raise ConfigError(f"{where}: a claim this tool cannot check must say why (reason:)")
        if c["metric"] == "loss_gate" and stages.get(c["stage"]).reference != c["versus"]:
            raise ConfigError(f"{where}: the loss gate of {c['stage']} is against {stages.get(c['stage']).reference}")
        for key in c.get("forms", []):
            if not stages.fp8_switches(stages.get(key)):
                raise ConfigError(f"{where}: form {key!r} is no FP8 stage")
        if c.get("leave_one_out") and c["leave_one_out"] not in levers.LEVERS:
            raise ConfigError(f"{where}: leave_one_out {c['leave_one_out']!r} is none of {', '.join(levers.LEVERS)}")
        if c["metric"] == "attention" and c.get("figure") not in ("step", "kernels"):
            raise ConfigError(f"{where}: an attention claim's figure is step or kernels")
        if QUOTED_RANGE.search(c["quote"]) and c["metric"] != "none" and len(c.get("expect", {})) < 2:
            raise ConfigError(f"{where} quotes a range ({QUOTED_RANGE.search(c['quote'])[0]}) but expects an open one")
        if c["metric"] == "misalignment" and not c.get("cublas"):
            raise ConfigError(f"{where}: a misalignment claim names the cuBLAS it speaks about (cublas:)")
    return data


def load_rules(path=RULES) -> dict:
    """A write-up's rule table (params/rules.yaml): per architecture, the chip families it covers
    and its rules, each judged by a claim of params/claims.yaml or not measured for a reason."""
    data, claims = yaml.safe_load(Path(path).read_text()), load_claims()
    ids = {c["id"] for c in claims["claims"]}
    if data.get("source") not in claims["sources"]:
        raise ConfigError(f"{path}: source {data.get('source')!r} is none of claims.yaml's sources")
    for arch in data["architectures"]:
        for family in arch["families"]:
            check_family(family, f"{path}: {arch['name']}")
        for rule in arch["rules"]:
            if "claim" in rule and rule["claim"] not in ids:
                raise ConfigError(f"{path}: {arch['name']} {rule['switch']}: no claim {rule['claim']!r} in claims.yaml")
    return data


def family_profiles(families) -> list[str]:
    """The profiles of the chip families `families`: what a report on them would be measured with."""
    return [p for p in profiles() if profile_family(p) in families]


def command(families) -> str:
    """The command that measures a claim on hardware of `families`."""
    names = family_profiles(families)
    if not names:
        return f"no profile of {' or '.join(families)} exists yet (add params/<gpu>.yaml)"
    return f"make report GPU={names[0]}" + (f" (or GPU={', '.join(names[1:])})" if names[1:] else "")


def timed_claim_checks(profile: str, path=CLAIMS) -> list[dict]:
    """{stage, versus, metric, expect} of every claim judged by step time that speaks about `profile`'s family (each
    form of an FP8 claim against the stage it is added to, with the claim's range): what the repeats ask of a figure
    before they give it a second process (lib/run/evidence.py claim_configs)."""
    from lib.results.decide import previous_stage

    family, out = profile_family(profile), []
    for c in load_claims(path)["claims"]:
        if c["metric"] in ("speedup", "time_change") and family in c["families"]:
            pairs = [(k, previous_stage(k)) for k in c["forms"]] if "forms" in c else [(c["stage"], c["versus"])]
            out += [{"stage": s, "versus": v, "metric": c["metric"], "expect": c["expect"]} for s, v in pairs]
    return out


def timed_claim_pairs(profile: str, path=CLAIMS) -> list[tuple[str, str]]:
    """(stage, versus) of every timed claim of timed_claim_checks, once each."""
    return list(dict.fromkeys((c["stage"], c["versus"]) for c in timed_claim_checks(profile, path)))
