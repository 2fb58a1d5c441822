"""A write-up's rule table (params/rules.yaml: seed 002's get_optimal_config(), switches picked by
GPU architecture) against what each compared GPU's report measured: one row per GPU and rule of
its architecture, with the measured figure, its basis and the verdict its claim got in the report's
decisions.json (lib/results/claims.py judged it)."""

from __future__ import annotations

import html
import re

import pandas as pd

from lib.core import config, stages
from lib.report import claims_view
from lib.report import formats as fmt
from lib.report.claims_view import NOT_APPLICABLE, NOT_MEASURED
from lib.results import profiles
from lib.results.claim_params import command, load_rules

TILE = re.compile(r"_(\d+)x(\d+)(?:x\d+)?_")  # a GEMM kernel's tile in its name: nvjet_sm90_tst_192x192_64x3_...


def architecture(profile: str) -> dict | None:
    """The architecture of the rule table that covers `profile`'s chip family, or None."""
    family = config.profile_family(profile)
    return next((a for a in load_rules()["architectures"] if family in a["families"]), None)


def _kernel(rep, spec: dict) -> str:
    """The largest kernel of `spec`'s category in the kernel profile of its stage (largest batch)."""
    rec, cat, title = (
        profiles.stage_profile(rep, spec["stage"]),
        spec["category"],
        stages.get(spec["stage"]).title,
    )
    k = next((k for k in (rec or {}).get("kernel_profile", {}).get("kernels", []) if k["category"] == cat), None)
    if k is None:
        return f"the report has no kernel profile of {title} with a {cat} kernel"
    tile = TILE.search(k["name"])
    return f"the largest {cat} kernel of {title} at B={rec['batch_size']} is {k['name']}" + (
        f", a {tile[1]}×{tile[2]} tile by its name" if tile else ""
    )


def _basis(rep, pair: tuple[str, str]) -> str:
    """A timing verdict's basis: the two stages it rests on and their tokens/s at every batch size both timed."""
    ok = rep.df[rep.df["status"] == "ok"].set_index(["stage", "batch_size"])["tokens_per_s"]
    a, b = pair
    both = sorted(n for (s, n) in ok.index if s == a and (b, n) in ok.index)
    return f"{stages.get(a).title} against {stages.get(b).title}, tokens/s " + "; ".join(
        f"B={n}: {fmt.tok(ok[(a, n)])} vs {fmt.tok(ok[(b, n)])}" for n in both
    )


def rows(name: str, rep) -> list[dict]:
    """One report's rows: each rule of its GPU's architecture with what the report measured."""
    arch = architecture(rep.params.name)
    if arch is None:
        return [
            {
                "gpu": name,
                "architecture": "",
                "rule": "",
                "comment": "",
                "measured": "no architecture of the rule table covers this GPU's chip family",
                "verdict": NOT_APPLICABLE,
            }
        ]
    verdicts = {v["id"]: v for v in rep.decided["claims"]["verdicts"]}
    out = []
    for rule in arch["rules"]:
        row = {
            "gpu": name,
            "architecture": arch["name"],
            "rule": f"{rule['switch']} = {rule['value']}",
            "comment": rule.get("comment", ""),
        }
        if "claim" in rule:
            v = verdicts[rule["claim"]]
            basis = _basis(rep, v["pair"]) if v["pair"] else ""
            row.update(measured="; ".join(filter(None, [basis, claims_view.measured_text(v)])), verdict=v["verdict"])
        else:
            kernel = _kernel(rep, rule["kernels"]) if "kernels" in rule else ""
            row.update(
                measured="; ".join(filter(None, [rule.get("reason", "no check of this rule is defined"), kernel])),
                verdict=NOT_MEASURED,
            )
        out.append(row)
    return out


def table(reps: dict) -> pd.DataFrame:
    return pd.DataFrame([r for name, rep in reps.items() for r in rows(name, rep)])


def html_table(reps: dict) -> str:
    t = table(reps)
    body = "".join(
        f"<tr><td><code>{claims_view.breakable(r.rule)}</code> <small>{html.escape(', '.join(filter(None, [r.comment, r.architecture])))}"
        f"</small></td><td>{html.escape(r.gpu)}"
        f'</td><td>{claims_view.breakable(r.measured)}</td><td><span class="{claims_view.CSS[r.verdict]}">{r.verdict}</span></td></tr>'
        for r in t.itertuples()
    )
    data, sources = load_rules(), next(iter(reps.values())).decided["claims"]["sources"]
    compared = {config.profile_family(rep.params.name) for rep in reps.values()}
    # named with the command that would measure them, their switches left to the file (the note filled a page)
    others = [
        f"{a['name']} ({command(a['families']) if a['families'] else 'no profile here'})"
        for a in data["architectures"]
        if not compared & set(a["families"])
    ]
    listed = ", ".join(others[:-1]) + " and " + others[-1] if len(others) > 1 else "".join(others)
    return (
        f'<table class="claims rules"><tr><th>Rule (architecture)</th><th>GPU</th><th>What its report measured</th>'
        f'<th>Verdict</th></tr>{body}</table><p class="note">Rules: <code>params/rules.yaml</code>, from '
        f"{html.escape(sources[data['source']])}. "
        + (f"The rules for {html.escape(listed)} apply to no GPU compared here." if others else "")
        + "</p>"
    )
