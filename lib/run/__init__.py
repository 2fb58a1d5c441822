"""Running a report: the launcher (runner), the jobs each chapter measures (evidence, recipe, size
sweep), the report folder and its run log, the notebooks, and the pipeline `make report` calls.
The top layer: it may import every other."""
