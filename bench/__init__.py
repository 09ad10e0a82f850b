"""Side-by-side benchmarks: vpatch vs raw `ssh host sed -i` vs ansible-core, on real sshd hosts.

`make bench` (or `python -m bench.run`) starts labs of real sshd test hosts with the test suite's
harness (tests/sshd.py), measures each contender in alternation, prints a table and writes
bench/results.json. See bench/run.py for what is measured and how.
"""
