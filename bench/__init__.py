"""Side-by-side benchmarks: vpatch vs raw `ssh host sed -i` vs ansible-core vs pyinfra, on real
sshd hosts, and vpatch's controller alone for 10,000 simulated targets.

`make bench` (or `python -m bench.run`) starts labs of real sshd test hosts with the test suite's
harness (tests/sshd.py), measures each contender in alternation, prints a table and writes
bench/results.json and bench/results.md (bench/publish.py). See bench/run.py for what is
measured and how, bench/simulate.py for the controller-only row.
"""
