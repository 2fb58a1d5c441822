"""What a report decides, as data computed once from its records: the recipe a team trains with (stage, micro-batch,
accumulation and GPUs at the global batch), each lever adopted, neutral, skipped or not yet with its worth and its
quality verdict and the horizon that verdict speaks for, the cumulative speed-up lever by lever, and the next
experiment. lib/run writes it to decisions.json after measuring and on every render; the report lays it out,
recommended.json hands it on, a comparison sets two side by side. No sentence is made here."""

from __future__ import annotations

from lib.core import record, stages
from lib.core.params import Params
from lib.results import (
    claim_figures,
    claims,
    crosscheck,
    decide,
    long_choice,
    long_quality,
    noise,
    parity,
    quality,
    scaling,
    size_sweep,
    store,
)
from lib.results.recipe_decision import make_recipe
from lib.results.leave_one_out import kept, leave_one_out
from lib.results.next_experiment import next_experiment
from lib.results.time_to_loss import ADOPT, NOT_YET, SKIP
from lib.results.waterfall import beyond_canonical, waterfall
from lib.results.stats import loss_noise

FILE = "decisions.json"
SCHEMA = 1
# adopt, skip and not yet are the long test's words too (one home: time_to_loss)
NEUTRAL, NOT_APPLICABLE, NOT_MEASURED = "neutral", "not applicable", "not measured"
# The order page 1 lists levers in: what to turn on first, what to leave for later last.
DECISION_ORDER = (ADOPT, NEUTRAL, NOT_YET, SKIP, NOT_APPLICABLE, NOT_MEASURED)


def _matrix_worth(key: str, df, tps: dict, records: list[dict]) -> dict | None:
    """A lever's speed-up over its own stack (the same configuration without it, the stage its quality test sets it
    against: the FP8 classifier over the loss-only forward, not the FP8 lm_head it follows in the matrix), else over
    the stage it is added to, at the largest batch both ran, judged against the noise."""
    own = stages.own_stack(key)
    timed = df[df["tokens_per_s"].notna()]
    mine_rows = timed[timed["stage"] == key]
    own_rows = timed[timed["stage"] == own]
    both = sorted(set(mine_rows["batch_size"]) & set(own_rows["batch_size"])) if own != key else []
    if both:
        b, prev = int(both[-1]), own
        ratio = float(
            mine_rows[mine_rows["batch_size"] == b]["tokens_per_s"].iloc[0]
            / own_rows[own_rows["batch_size"] == b]["tokens_per_s"].iloc[0]
        )
    else:
        rows = df[(df["stage"] == key) & df["speedup_vs_previous"].notna()]
        if rows.empty:
            return None
        row = rows.loc[rows["batch_size"].idxmax()]
        b, prev, ratio = int(row["batch_size"]), row["previous_stage"], float(row["speedup_vs_previous"])
    floor, across = noise.decision_floor(records, tps), noise.across_machines(records)
    # the allocator's peak the lever takes off its stack at that batch: what a lever the recipe needs to fit buys
    peaks = [timed[(timed["stage"] == k) & (timed["batch_size"] == b)]["mem_allocator_bytes"] for k in (prev, key)]
    saved = float(peaks[0].iloc[0] - peaks[1].iloc[0]) if all(len(p) and p.notna().all() for p in peaks) else None
    mine = tps.get((key, b)) or list(mine_rows[mine_rows["batch_size"] == b]["tokens_per_s"])
    theirs = tps.get((prev, b)) or []
    return {
        "basis": "matrix",
        "ratio": ratio,
        "batch": b,
        "against": prev,
        "within_noise": noise.within_noise(mine, theirs, floor, across) if theirs else None,
        "memory_saved_bytes": saved,
    }


def _not_run(key: str, df) -> tuple[str, str] | None:
    """(decision, reason) for a stage with no timed record: not applicable here (its reason), or not measured."""
    rows = df[df["stage"] == key]
    if rows["status"].isin(record.TIMED).any():
        return None
    if rows.empty:
        return NOT_MEASURED, "no record"
    na = rows[rows["status"] == record.Status.NOT_APPLICABLE]
    if not na.empty:
        return NOT_APPLICABLE, str(na["reason"].iloc[0] or "")
    return NOT_MEASURED, str(rows["status"].iloc[0])


def lever_rows(records: list[dict], df, params: Params, recipe: dict | None, loo: tuple, checks: dict) -> list[dict]:
    """One row per single-GPU lever of the report (every stage after the first): its decision, worth and quality.
    In the recipe: adopt where leaving it out costs beyond noise or does not fit, not yet where the recipe ran faster
    without it beyond noise (never skip: the recipe has it on), else neutral (kept as the recipe has it). Outside it: skip where slower, no faster
    beyond noise, or its quality failed; not yet where faster beyond noise and its quality undecided or untested."""
    tps = decide.throughputs(records)
    in_recipe = set(decide.lineage(recipe["stage"])[1:]) if recipe else set()
    full, rows = loo
    base = params.evidence.baseline.stage
    canonical = set(decide.lineage(base)[1:]) if base in params.stages else set()
    by_stage = {r["stage"]: r for r in rows if r.get("stage")}
    out = []
    for key in stages.single_gpu(params.stages)[1:]:
        st = stages.get(key)
        row = {"stage": key, "title": st.title, "in_recipe": key in in_recipe, "reason": None}
        # a lever the canonical trainer has too: the recipe's lead over that trainer comes from the others
        row["in_canonical"] = key in canonical
        row["quality"] = quality.of(key, checks, df, params)
        row["matrix"] = _matrix_worth(key, df, tps, records)
        off = by_stage.get(key)
        row["leave_one_out"] = (
            {
                "worth": off["worth"],
                "batch": full["batch_size"],
                "within_noise": off.get("within_noise"),
                "cannot_fit": record.cannot_fit(off["record"]),
                "predicted": record.is_predicted_oom(off["record"]),
                "status": off["record"].get("status"),
                "removed_with": off["lever"],
            }
            if off and full
            else None
        )
        row["over_recipe"] = long_choice.over(tps, key, recipe["stage"]) if recipe and key not in in_recipe else None
        row["attention_kernel"] = _attention_kernel(records, key)
        row["decision"], row["reason"] = _decide(row, _not_run(key, df))
        out.append(row)
    if recipe:
        quality.cover_by_stack(out, recipe["stage"], decide.lineage(recipe["stage"]))
    return out


def lever_speedup(row: dict) -> float:
    """What a lever's run gains in speed against its reference, as a long test prices it: its ratio over the recipe
    where it is not in it, else its leave-one-out worth, else (a lever of the recipe the leave-one-out did not switch
    off) its ratio over its own stack in the matrix; 1 where none was measured."""
    loo = (row.get("leave_one_out") or {}).get("worth")
    return (
        (row.get("over_recipe") or {}).get("ratio")
        or (1 + loo if loo is not None else None)
        or (row.get("matrix") or {}).get("ratio")
        or 1
    )


def long_verdicts(
    rows: list[dict],
    long_records: list[dict],
    pairs: list,
    noise_floor: float | None,
    recipe: dict | None = None,
    tps: dict | None = None,
) -> None:
    """Each lever's verdict in time to the same loss where the long quality test ran it against its own reference
    (long_quality.verdict), as row['long']: priced at the speed-up of the same two stages in the matrix (`tps`,
    decide.throughputs), so the speed and the loss compared are of one pair; lever_speedup where the matrix lacks
    either. The recipe's whole stack against the canonical trainer's stage is the recipe's (recipe['long']), not its
    last lever's. The verdict decides a lever outside the recipe that is not yet decided: skip where it reaches the
    same loss later beyond noise, else not yet (an adopt waits for the sitting that re-chooses the recipe with it,
    which is the only way it is timed as trained)."""
    canonical = ((recipe or {}).get("canonical") or {}).get("stage")
    # which reference each lever was tested against, as the test's verdict files name them: its own stack first (a
    # run of the recipe's stage serves its own test and the whole stack's)
    against = {}
    for lever, reference in sorted(pairs, key=lambda p: p[1] != stages.own_stack(p[0])):
        whole = recipe and lever == recipe["stage"] and reference == canonical != stages.own_stack(lever)
        if not whole:
            against.setdefault(lever, reference)
    for row in rows:
        mine = [r for r in long_records if r.get("stage") == row["stage"] and r.get("status") == record.Status.OK]
        row["long"] = None
        if not mine or row["stage"] not in against:
            continue
        pair = long_choice.over(tps or {}, row["stage"], against[row["stage"]])
        row["long"] = long_quality.verdict(
            long_records,
            row["stage"],
            against[row["stage"]],
            mine[0]["batch_size"],
            pair["ratio"] if pair else lever_speedup(row),
            noise_floor or 0.0,
        )
        if row["long"]:  # what the test's command took, so the next experiment can add seeds to the same test
            row["long"]["micro_steps"] = mine[0].get("micro_steps") or 1
        if row["long"] and not row["in_recipe"] and row["decision"] == NOT_YET:
            v = row["long"]["decision"]
            row["decision"], row["reason"] = (
                (SKIP, "later to the same loss")
                if v == SKIP
                else (NOT_YET, "sooner to the same loss: the recipe is re-chosen with it at the next sitting")
                if v == ADOPT
                else (NOT_YET, "time to the same loss undecided")
            )
    if recipe:
        recipe["long"] = whole_stack_long(long_records, recipe, noise_floor)
        quality.cover_by_long_stack(rows, recipe, decide.lineage(recipe["stage"]))


def whole_stack_long(long_records: list[dict], recipe: dict, noise_floor: float | None) -> dict | None:
    """The recipe's whole stack against the canonical trainer's stage in time to the same loss, judged at the recipe's
    lead over that trainer as timed as trained: from whichever long runs of the two stages share seeds (the recipe's
    stage may have run as a lever's test and the canonical trainer's as another stack's reference). None where
    fewer than two seeds have both, or the recipe was not timed against the canonical trainer."""
    canonical = (recipe.get("canonical") or {}).get("stage")
    mine = [r for r in long_records if r.get("stage") == recipe["stage"] and r.get("status") == record.Status.OK]
    if not canonical or canonical == recipe["stage"] or not mine or not recipe.get("ratio"):
        return None
    v = long_quality.verdict(
        long_records, recipe["stage"], canonical, mine[0]["batch_size"], recipe["ratio"], noise_floor or 0.0
    )
    if v:
        v["micro_steps"] = mine[0].get("micro_steps") or 1
    return v


def ablation_twin(ablation: list[dict], tps: dict, floor: float | None) -> dict | None:
    """A leave-one-out row timed twice (noise.twin_drift: its configuration is a stage of the matrix too), judged
    against the process-to-process spread `floor`: within_floor False means a worth within that spread is within noise
    too."""
    twin = noise.twin_drift(ablation, tps)
    return {**twin, "floor": floor, "within_floor": floor is not None and twin["gap"] <= floor} if twin else None


def long_decisions(rows: list[dict]) -> dict:
    """{stage: its long test's decision} for each lever a long test judged against its own reference."""
    return {row["stage"]: row["long"]["decision"] for row in rows if row.get("long")}


def _scaling(matrix: list[dict], best: dict | None, records: list[dict], recipe: dict | None, tolerance: float) -> dict:
    """The scaling curve against its single-GPU reference, each point's loss held to the one-GPU recipe's."""
    single = scaling.single_gpu(matrix, best, records)
    side = ((recipe or {}).get("sides") or {}).get("recommended")
    same = side and single and (side["stage"], side["batch"]) == (single["stage"], single["batch_size"])
    return {"single": single, "curve": scaling.curve(matrix, single, side["final_loss"] if same else None, tolerance)}


def _long_measured_by(rows: list[dict], recipe: dict | None, evidence: dict) -> dict | None:
    """Where the runs that the long verdicts rest on were measured (a run waiting for its pair is not counted)."""
    verdicts = [row["long"] for row in rows if row.get("long")] + [v for v in [(recipe or {}).get("long")] if v]
    runs = long_quality.judged_runs(_long_ok(evidence), verdicts)
    return long_quality.measured_by(runs) if runs else None


def _long_ok(evidence: dict) -> list[dict]:
    return [r for r in evidence.get("long") or [] if r.get("status") == record.Status.OK]


def _attention_kernel(records: list[dict], key: str) -> str | None:
    """The attention kernel SDPA dispatched to where this lever turned SDPA on (its records name one, the stage before
    it none): "Flash attention (SDPA)" ran cuDNN's on the H100 and H200, which page 1 had left to a later chapter."""

    def kernels(stage):
        return {r.get("sdpa_backend") for r in records if r.get("stage") == stage and r.get("status") == "ok"} - {None}

    mine, before = kernels(key), kernels(decide.previous_stage(key)) if decide.previous_stage(key) else set()
    return ", ".join(sorted(mine)) if mine and not before else None


def _decide(row: dict, not_run: tuple | None) -> tuple[str, str | None]:
    if not_run:
        return not_run
    q, m, loo = row["quality"] or {}, row["matrix"], row["leave_one_out"]
    failed = q.get("verdict") in (parity.WORSE, "failed")
    if row["in_recipe"]:
        if loo and (
            loo["cannot_fit"] or (loo["worth"] is not None and loo["worth"] > 0 and loo["within_noise"] is False)
        ):
            return ADOPT, "needed to fit" if loo["cannot_fit"] else "pays"
        if loo is None and m and m["ratio"] > 1 and m["within_noise"] is False:
            return ADOPT, "pays in the matrix"
        if loo and loo["worth"] is not None and loo["worth"] < 0 and loo["within_noise"] is False:
            # The recipe is a measured configuration with it on: a skip would contradict the recipe the page hands
            # on (the CPU default's read "skip" beside a recipe that kept it). Not yet, until measured without it.
            return NOT_YET, "the recipe ran faster without it, one step a micro-batch; not yet measured as trained"
        return NEUTRAL, "within noise" if loo and loo["within_noise"] else "not shown to pay"
    if failed:
        return SKIP, "quality"
    if m is None:
        return NOT_MEASURED, "no speed-up measured"
    if m["ratio"] <= 1 or m["within_noise"]:  # unknown noise (None) leaves a faster lever to be decided
        return SKIP, "slower" if m["ratio"] < 1 and m["within_noise"] is False else "no gain beyond noise"
    if row["over_recipe"] and row["over_recipe"]["ratio"] < 1:
        # faster than its own stack, slower than the recipe: an alternative the recipe already beats (the FP8
        # lm_head once the recipe took the FP8 classifier, which replaces it)
        return SKIP, "slower than the recipe"
    if q.get("verdict") == parity.HOLDS:
        return NOT_YET, "faster, held, not on the recipe's path"
    return NOT_YET, "quality undecided" if q.get("test") == "parity" else "quality not tested"


def compute(
    records: list[dict],
    evidence: dict,
    params: Params,
    env: dict,
    price: dict | None = None,
    checks: dict | None = None,
    choice: tuple | None = None,
) -> dict:
    """Every decision of a report folder (records: store.decision_records; evidence: store.load_evidence with the
    matrix's records under 'matrix' and the GPU-seconds its sitting measured under 'sitting_gpu_s'; price: prices.stated, the price per GPU-hour and its source; checks: parity.checks
    of the records and choice, long_choice.choose's pick and the checks it chose with, where the caller has them, so a
    render judges them once)."""
    order = params.stages
    matrix = [r for r in evidence.get("matrix") or [] if r.get("stage") in order]
    drift, tps = loss_noise(records), decide.throughputs(records)
    # the widest spread between processes of one configuration (the tie rule's and the leave-one-out's noise;
    # decision_floor widens it to the spread between machines where the records come from several)
    process_floor = noise.noise_floor(tps)
    df = decide.table(matrix, order, params.run.loss_tolerance, drift, tps, decide.step_times(records))
    df.attrs["loss_noise"] = drift
    checks = parity.checks(records, params.evidence) if checks is None else checks
    # the recipe is chosen with the levers the long test admits (long_choice); the views' quality reads `checks`
    chosen, chosen_with = choice or long_choice.choose(records, params, evidence, checks)
    recipe = make_recipe(records, evidence, params, env, price, chosen_with, chosen)
    loo = leave_one_out(records, evidence.get("ablation") or [])
    levers_ = lever_rows(records, df, params, recipe, loo, checks)
    floor = noise.decision_floor(records, tps)
    long_verdicts(levers_, evidence.get("long") or [], evidence.get("long_pairs") or [], floor, recipe, tps)
    wf = waterfall(df, recipe, order[0])
    full = loo[0]
    # a lever a long test judged, or one decided without its short test (the FP8 lm_head the recipe outran), is not
    # "left to full depth": its row says what decides it
    judged = {r["stage"] for r in levers_ if r.get("long") or r["decision"] == SKIP}
    left = [k for k in parity.left_to_full_depth(checks, params) if k not in judged]
    return {
        "schema": SCHEMA,
        "profile": params.name,
        # the matrix a row a configuration with its divergence check, which every view reads (judged here alone)
        "table": store.table_rows(df),
        "backend": params.backend,
        "recipe": recipe,
        # what the recipe adds to the canonical trainer first (its lead comes from these), then what it shares
        "levers": sorted(levers_, key=lambda r: (r["in_canonical"], DECISION_ORDER.index(r["decision"]))),
        "leave_one_out": kept(loo),
        "leave_one_out_batch": full["batch_size"] if full else None,
        # the configuration it switched levers off from: the recipe's stage, unless a sitting ran it elsewhere
        "leave_one_out_stage": full["stage"] if full else None,
        "leave_one_out_twin": ablation_twin(evidence.get("ablation") or [], tps, process_floor),
        "process_floor": process_floor,
        "waterfall": wf,
        "beyond_canonical": beyond_canonical(wf, recipe),
        "next": next_experiment(
            levers_,
            recipe,
            params.evidence.parity_batch or (recipe or {}).get("micro_batch"),
            params.name,
            evidence.get("sitting_gpu_s"),
        ),
        "noise_floor": floor,
        # how many machines timed the records, and the spread between them where a configuration ran on several
        "machine_spread": noise.machine_spread(records),
        # the plain loop against the harness, a row a configuration with its verdict against the noise
        "crosscheck": crosscheck.rows(records, evidence.get("crosscheck") or [], tps, floor),
        # each model size's noise band and each FP8 form's crossover, where the size sweep was measured (else None)
        "size_sweep": size_sweep.decided(evidence.get("size") or [], floor),
        "scaling": _scaling(evidence.get("matrix") or [], chosen, records, recipe, params.run.loss_tolerance),
        # where the long tests' runs were measured, from their own records (they may span sittings and machines)
        "long_measured_by": _long_measured_by(levers_, recipe, evidence),
        # the levers whose quality test this depth left to DEPTH=full, and the lever that did not hold beside them
        "left_to_full_depth": left,
        # the stages whose quality test did not let them stand (never recommended), in the tests' order
        "rejected": list(parity.rejected(checks)),
        # what each undecided quality test would need to decide, were its mean and spread to hold (None: nothing in reach)
        "to_decide": {k: parity.to_decide(c) for k, c in checks.items()},
        "fell_back_from": sorted(parity.fallbacks(checks).values()) if left else [],
        "claims": claims.judged(
            df,
            records,
            evidence,
            params,
            claim_figures.facts(evidence, params, env, recipe, checks, loo, left, floor, long_decisions(levers_)),
            floor,
        ),
    }
