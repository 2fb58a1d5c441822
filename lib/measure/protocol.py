"""The worker's lines to the launcher on its stdout (lib/run/runner.py reads them): one per finished
configuration, one when every job of a batch has been handled. A module of its own so the launcher
reads them without importing torch."""

DONE_PREFIX = "@@done "  # the measurement launcher's one line per finished configuration, on its stdout
BATCH_DONE = "@@batch-done"  # ... and its line when every job of a batch has been handled
LAUNCHER_NOTE = "launcher: "  # on its stderr: what the launcher says of itself (preload.py); the run log shows it
