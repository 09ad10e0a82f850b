# vpatch — every target does its own set-up; `make test` is what CI runs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CACHE ?= /var/cache/vpatch-test
# Test workers: most of the suite waits on real sshd hosts, servers and pip, so two workers
# on a 2-core machine take a little over half the serial time. Each worker starts its own labs.
TEST_JOBS ?= 2
export VPATCH_TEST_CACHE := $(CACHE)

.PHONY: install test test-deps lint unit sanity demo demo-rollout demo-containers k8s-lab bench docs man clean

$(BIN)/vpatch: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(BIN)/vpatch

$(BIN)/mkdocs: pyproject.toml $(BIN)/vpatch
	$(BIN)/pip install -q -e '.[docs]'
	touch $@

lint: install
	$(BIN)/ruff check patcher vpatch tests bench ansible_collections
	$(BIN)/ruff format --check patcher vpatch tests bench ansible_collections
	$(BIN)/mypy

unit: install
	$(BIN)/pytest -q tests/unit

# What the suite needs from the OS on a fresh machine: real sshd test hosts (tests/sshd.py),
# sudo for the non-root --sudo tests, zsh and fish for the completion tests (each script loaded
# in its real shell), groff to render the man page and man-db's `man` to find it where the wheel
# installs it, GNU diff and patch for the unified-diff round trips (tests/unit/test_udiff_gnu.py),
# Graphviz's dot to draw the site's figures (`make docs`), headless Chromium to lay the built
# site out as a reader's browser does (tests/integration/test_site.py), and the container
# engines of the container lab (tests/integration/test_containers.py). Installed only when
# missing (apt-get needs root, as CI is).
test-deps:
	@if [ ! -x /usr/sbin/sshd ] || ! command -v sudo >/dev/null || ! command -v zsh >/dev/null \
	    || ! command -v fish >/dev/null || ! command -v groff >/dev/null \
	    || ! command -v tmux >/dev/null || ! command -v man >/dev/null \
	    || ! command -v setfacl >/dev/null || ! command -v diff >/dev/null \
	    || ! command -v patch >/dev/null || ! command -v dot >/dev/null \
	    || ! command -v chromium >/dev/null; then \
	  echo "make: installing openssh-server, sudo, zsh, fish, groff-base, man-db, tmux, acl, diffutils, patch, graphviz and chromium (apt-get)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq openssh-server sudo zsh fish groff-base \
	    man-db tmux acl diffutils patch graphviz chromium >/dev/null; \
	fi
	@# The container lab (tests/support/containerlab.py): rootful podman with runc, docker's
	@# daemon, and mmdebstrap, which builds the lab's image from Debian packages once (cached
	@# under $(CACHE)/containers).
	@if ! command -v podman >/dev/null || ! command -v runc >/dev/null \
	    || ! command -v conmon >/dev/null || ! command -v catatonit >/dev/null \
	    || ! command -v mmdebstrap >/dev/null || ! command -v dockerd >/dev/null; then \
	  echo "make: installing podman, runc, conmon, catatonit, mmdebstrap and docker.io (apt-get)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends podman runc conmon \
	    catatonit mmdebstrap docker.io >/dev/null; \
	fi

# In `make test` so a broken page, link or reference generator, or a collection ansible-test
# rejects, fails CI (docs: a few seconds; sanity: ~20 s warm, about a minute on a new machine).
test: install test-deps lint docs sanity
	$(BIN)/pytest -q -ra --durations=15 -n $(TEST_JOBS) --dist loadfile tests

# The Ansible collection under `ansible-test sanity` (validate-modules, pylint, ...): tests/sanity.py
sanity: install
	$(BIN)/python -m tests.sanity

demo: install
	$(BIN)/python -m tests.envs demo

# The rollout story on 4 lab hosts (tests/demo_rollout.py): canary rolled back, back-port kept.
demo-rollout: install
	$(BIN)/python -m tests.demo_rollout

# The bench's own contenders (pyinfra: the `bench` extra; ansible-core gets a venv of its own).
$(BIN)/pyinfra: pyproject.toml $(BIN)/vpatch
	$(BIN)/pip install -q -e '.[bench]'
	touch $@

# Running containers as targets on a real podman (tests/demo_containers.py): a rollout over three
# containers rolls the bad patch back and keeps the good one; a re-create drops it.
demo-containers: install test-deps
	$(BIN)/python -m tests.demo_containers

# Pods as targets on a real one-node Kubernetes 1.20 in its own namespaces (tests/k8slab,
# tests/support/k8slab.py): kube-apiserver and kubelet built once from Debian's source package
# (~20 min on 2 cores, cached under $(CACHE)/k8s), etcd and containerd from Debian. Not in `test`.
k8s-lab: install test-deps
	VPATCH_K8S_LAB=1 $(BIN)/pytest -q -s -n 0 tests/k8slab

# vpatch vs ssh+sed vs ansible-core vs pyinfra on 1, 8, 32, 128 real sshd hosts, and vpatch's
# controller alone for 10,000 simulated targets; writes bench/results.json and bench/results.md.
# The rows measure this tree installed as users install it (README: pipx / uv tool): a venv of
# its own with a non-editable install and only the runtime dependencies (bench/measured.py).
BENCH_VPATCH := $(VENV)/installed
# Round-trip times in ms (bench/delay.py in front of every host above 0): `make bench BENCH_RTT=0,2,30`
BENCH_RTT ?= 0
bench: install $(BIN)/pyinfra
	$$($(BIN)/python -c 'import sys; print(sys._base_executable)') -m venv --clear $(BENCH_VPATCH)
	$(BENCH_VPATCH)/bin/pip install -q .
	VPATCH_BENCH_VPATCH=$(abspath $(BENCH_VPATCH))/bin/vpatch $(BIN)/python -m bench.run --rtt $(BENCH_RTT)

# The site: mkdocs-material, references and figures generated from the code (docs/_hooks.py;
# the figures drawn by Graphviz's dot, which `make test-deps` installs); -> site/
# No --quiet: it hides warnings from the counter --strict aborts on, so a broken link or anchor
# (mkdocs.yml's validation) would build without a word.
docs: $(BIN)/mkdocs
	@command -v dot >/dev/null || { echo "error: make docs draws its figures with Graphviz's dot"; \
	  echo "hint: apt-get install graphviz (or make test-deps)"; exit 2; }
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

# vpatch(1) from the parser, committed: the wheel installs man/vpatch.1 as share/man/man1/
# (pyproject's data-files); tests/unit/test_docgen.py fails while it differs from the parser.
man: install
	$(BIN)/python docs/_hooks.py > man/vpatch.1.tmp && mv man/vpatch.1.tmp man/vpatch.1

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache site
