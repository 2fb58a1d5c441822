"""Measuring on the device, in the processes the launcher starts: the worker that times a stage
(worker), the DDP job, the GEMM sweep, the kernel profile, NVML energy and clocks, the environment,
the compile cache and fault injection for tests. Imports lib.core, lib.results and lib.train."""
