"""Two nodes rehearsed on one host (ddp_launch runs the job; chapters.ddp_points says when): a team that outgrows one
machine knows the path across nodes works before it rents two."""

from __future__ import annotations

import socket
import threading

from lib.core import record
from lib.core.params import Params
from lib.run import ddp_launch, runner


def host_address() -> str:
    """This host's own address, where a rehearsed second node meets the first; loopback where the host's name does
    not resolve to an address this process can listen on."""
    try:
        address = socket.gethostbyname(socket.gethostname())
        free_port(address)
        return address
    except OSError:
        return "127.0.0.1"


def free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def rehearse_two_nodes(params: Params, report_dir, per_node: int, force: bool = False, timeout_s: float = 1800):
    """Two nodes rehearsed on one host: the host's GPUs split in two halves, each half a node of `per_node` ranks
    (its own CUDA_VISIBLE_DEVICES), the two torchrun launches meeting through the c10d rendezvous at this host's own
    address: the same job, launch line and record shape as two machines of `per_node` GPUs (`make report NNODES=2
    NODE_RANK=i RDZV=...`). Node 0 writes the record (ddp__b<B>__g<2 x per_node>__n2.json) and it is returned; an
    earlier run's record whose fingerprint still matches is returned without measuring (unless `force`)."""
    address = host_address()
    rdzv = f"{address}:{free_port(address)}"
    launch = [
        {
            "nnodes": 2,
            "node_rank": r,
            "rdzv": rdzv,
            "visible": ",".join(map(str, range(r * per_node, (r + 1) * per_node))),
        }
        for r in (0, 1)
    ]
    kept = planned_record(params, report_dir, per_node, launch[0])
    if kept and not force:
        return kept
    failed: list = []

    def node_one():
        try:
            ddp_launch.run_ddp(params, report_dir, nproc=per_node, timeout_s=timeout_s, force=True, launch=launch[1])
        except Exception as e:  # node 0's record says the job failed; this says why node 1 did
            failed.append(e)

    helper = threading.Thread(target=node_one, daemon=True)
    helper.start()
    rec = ddp_launch.run_ddp(params, report_dir, nproc=per_node, timeout_s=timeout_s, force=True, launch=launch[0])
    helper.join(timeout=timeout_s)
    if failed and rec and rec.get("status") != record.Status.OK:
        rec["reason"] = f"{rec.get('reason')}; {failed[0]}"
    return rec


def planned_record(params: Params, report_dir, nproc: int, launch: dict) -> dict | None:
    """The DDP record of this job kept from an earlier run where its fingerprint still matches (run_ddp's own check,
    asked before the second node of a rehearsal is started, so it never waits for a node 0 that measures nothing)."""
    job = ddp_launch.plan(params, report_dir, nproc, launch["nnodes"])
    return runner.reusable(job["out"], job["fp"])
