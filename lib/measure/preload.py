"""What the measuring launcher (lib/measure/worker.py) imports once, before it forks a child per measurement,
so that no child pays for the import itself, and no import that would leave a forked child unable to use the GPU."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time

from lib.measure import protocol

# torch._inductor.compile_fx is not in PRELOADED. Preloaded outright (commit 103c013), every forked child on two
# H200s failed "Cannot re-initialize CUDA in forked subprocess"; without it (f826bfe) they ran.
# torch.cuda.is_initialized() stayed False after importing it there, so the state that breaks a fork is not the
# one that call reports: fork_is_clean asks a forked child itself.
PRELOADED = ("torch._dynamo",)
# Imported once in the launcher where it is safe, which a throwaway child tries first (trial_import): each compiled
# child otherwise imports Inductor itself. On an H100 (tools/probe_preload.py, 2026-11-26) that import took 2.2-3.4 s,
# the whole of the difference between a compiled stage's build phase and an eager one's (about 5 s against 2 s).
TRIED = ("torch._inductor.compile_fx",)
# What broke the fork: importing torch._inductor.lowering asks whether CUDA is available, and PyTorch answers that
# through the CUDA runtime, which marks every later fork unable to use the GPU. With this variable (PyTorch's own,
# for forked processes) it asks NVML instead; on that H100 a child forked after importing compile_fx then computed
# on the GPU, and without it could not. The children initialise CUDA as before.
NVML_CHECK = ("PYTORCH_NVML_BASED_CUDA_CHECK", "1")


def fork_is_clean(use_device: bool = False, timeout_s: float = 120) -> bool:
    """Whether a child forked now could use the GPU: a throwaway child reports PyTorch's bad-fork state and,
    with `use_device`, computes on the GPU where there is one (a child that hangs there past `timeout_s` is
    killed and counts as unclean)."""
    import torch

    pid = os.fork()
    if pid == 0:
        ok = not torch.cuda._is_in_bad_fork()
        if ok and use_device and torch.cuda.is_available():
            ok = torch.ones(1, device="cuda").add(1).item() == 2
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + timeout_s
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.02)
    return os.WIFEXITED(done[1]) and os.WEXITSTATUS(done[1]) == 0


def trial_import(name: str) -> str | None:
    """Import `name` in a throwaway child and ask whether a child forked after it could still use the GPU
    (computing on it, not only PyTorch's bad-fork state). None if it could; else why not, for the run's log."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(2, 1)  # the launcher's stdout is its channel to the runner
        verdict = "could not import it"
        try:
            importlib.import_module(name)
            verdict = "" if fork_is_clean(use_device=True) else "a child forked after it could not use the GPU"
        finally:
            os.write(write, verdict.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        verdict = pipe.read()
    os.waitpid(pid, 0)
    return verdict or None


REFUSED: dict[str, str] = {}  # tried modules a throwaway child showed unsafe, and why: tried once per launcher


def preload(backend: str | None = None) -> None:
    """Import, once in the launcher, what every child would otherwise import for itself: the optimizer's
    first construction imports torch._dynamo (about 2 s on a small CPU); given the jobs' backend, Inductor too
    where it is safe (the CPU has no GPU to break; elsewhere a throwaway child tries it first). The launcher
    must leave its forked children a usable device: a preload after which a fork is not clean is refused, with
    its name; a tried one that would be is left out and the log says why."""
    os.environ.setdefault(*NVML_CHECK)  # before any import that asks whether CUDA is available
    for name in PRELOADED + (TRIED if backend else ()):
        if name in sys.modules or name in REFUSED:
            continue
        tried = name in TRIED and backend != "cpu"  # the CPU has no GPU to break
        if tried and (why := trial_import(name)):
            REFUSED[name] = why
            print(f"{protocol.LAUNCHER_NOTE}{name} not preloaded: {why}", file=sys.stderr, flush=True)
            continue
        importlib.import_module(name)
        if not fork_is_clean():
            raise RuntimeError(f"preloading {name} left the launcher unable to fork a child that can use the GPU")
        if tried:
            print(
                f"{protocol.LAUNCHER_NOTE}{name} preloaded (a child forked after it computed on the GPU)",
                file=sys.stderr,
                flush=True,
            )
