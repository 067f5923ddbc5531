"""splitlab's benchmarks: each `bench_*.py` module has `run(quick: bool) -> list[dict]`; `python -m bench` runs
them all and prints one table of rows {bench, name, value, unit, baseline, ratio}. Targets are printed, never
asserted."""
