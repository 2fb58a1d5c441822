"""The parity test of the earlier method (records without a seed: one long run of the lever, the reference once or
twice), judged by the rule it was measured under (lib/results/parity.py's docstring), never dropped or left to decide
nothing."""

from __future__ import annotations

from lib.core import stages
from lib.results.stats import envelope_gap

EARLIER_TOLERANCE = 0.05  # nats: the earlier method's parity rule (run.loss_tolerance when its runs were made)


def checks(runs: dict) -> dict:
    """stage -> its parity run of the earlier method (module docstring), judged by that method's rule; where it ran
    at several batch sizes, the one at the larger."""
    by, out = runs, {}
    for (key, batch), seeds in sorted(by.items(), key=lambda kv: kv[0][1]):
        ref_key = stages.get(key).reference if key in stages.STAGES else key
        refs = by.get((ref_key, batch), {}).get(0, [])
        own = seeds.get(0, [])
        if ref_key == key or not refs or not own:
            continue
        held_refs = [r["held_out_loss"] for r in refs]

        def beyond(run, refs=refs, held_refs=held_refs):  # (training loss, held-out loss) outside the reference's
            held = run["held_out_loss"]
            gap = envelope_gap(run.get("losses") or [], [r.get("losses") or [] for r in refs])
            return gap, max(0.0, min(held_refs) - held, held - max(held_refs))

        worst = max(own, key=lambda r: max(beyond(r)))  # every run of the lever is judged; the worst speaks for it
        outside, held_outside = beyond(worst)
        ok = bool(outside <= EARLIER_TOLERANCE and held_outside <= EARLIER_TOLERANCE)
        out[key] = {
            "stage": key,
            "reference": ref_key,
            "batch_size": batch,
            "protocol": "earlier",
            "runs": len(own),
            "reference_runs": len(refs),
            "steps": worst.get("steps"),
            "micro_steps": refs[0].get("micro_steps", 1),
            "outside": outside,
            "held_outside": held_outside,
            "held_out_loss": worst["held_out_loss"],
            "reference_held_out_loss": held_refs,
            "tolerance": EARLIER_TOLERANCE,
            "seeds": [],
            "ok": ok,
            "other_batches": [],
        }
    return out
