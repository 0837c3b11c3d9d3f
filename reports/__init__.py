"""Reports for runs and benchmarks: self-contained HTML with plots, JSON
(``verdict.json``, ``bench.json``), JUnit XML and Markdown summaries, and the
recovery-time benchmark tables.
"""
