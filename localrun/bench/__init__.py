"""`make bench` (``python -m localrun bench``): the benchmark's run (bench.py), its load driver,
ceiling, scenarios and report, the CPU meter and the bill's prices (cost.py)."""
