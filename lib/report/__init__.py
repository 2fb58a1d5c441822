"""Turning a report folder's records into what people read: loading them (loader), tables, prose,
charts, each chapter's views, claim verdicts, the summary box, the comparison of GPUs and the HTML/PDF
export. Imports lib.core and lib.results; never measures."""
