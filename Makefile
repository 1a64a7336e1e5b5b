# sentinel — build, test and demo. Everything installs into project-local folders.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: all install demo test check lint typecheck contracts unit loopback engine engine-env engine-env-bg chaos chaos-sim bench bench-sim clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The release's files: the sdist and the wheel, built as pip builds them (an isolated
# build with setuptools from the index) into dist/ (git-ignored), then checked as the
# package index checks them (twine check --strict). Part of `make test`; tests/package
# builds them from a clone and installs them into fresh virtual environments;
# .github/workflows/release.yml builds and publishes them from a tag.
.PHONY: dist
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --quiet --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

# tests/package alone (also in the loopback tier): `pip install .` from a clone and the
# built wheel into fresh virtual environments, the Dockerfile's build steps without a
# daemon, the workflows. About 30 s on two cores.
.PHONY: package
package: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -p no:cacheprovider tests/package

demo: $(STAMP)
	$(VENV)/bin/sentinel demo

# The README's incident figure, from a real run of the demo's machinery on the simulator
# (40 s of light load, the engine_hang fault, the confirmed hang's bundle): about a minute.
.PHONY: readme-figure
readme-figure: $(STAMP)
	$(PY) -m tools.readme_figure docs/images/incident-timeline.png

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

contracts: $(STAMP)
	$(VENV)/bin/lint-imports

# The check to run after every edit: lint, types, layering contracts, unit tests
# (about a minute and a half with the virtual environment installed).
check: lint typecheck contracts unit

unit: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

# Two workers, a whole file each, slowest files first (tests/durations.py says why;
# --no-loadscope-reorder keeps that order instead of xdist's by count of tests).
loopback: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -p no:cacheprovider \
		-m "not slow and not engine" --ignore=tests/unit tests

# The pod as shipped: sentinel as uid 10001 with no capabilities in a read-only root
# beside a root server (as root; part of `make test`). -rs prints a named skip's reason.
.PHONY: nonroot
nonroot: $(STAMP)
	$(PY) -m pytest -q -rs -p no:cacheprovider tests/nonroot

# The whole suite. The real-vLLM environment builds in the background while lint,
# types and the fast tiers run; the engine tests (ordered last) wait for it.
# In tiers, fastest first (durations and budgets: tests/README.md): the check,
# then loopback (simulator, real sockets, Prometheus tools, a non-root
# sidecar), then the real-vLLM tier.
test: $(STAMP)
	$(MAKE) engine-env-bg
	$(MAKE) check
	$(MAKE) dist
	$(MAKE) prometheus-tools
	$(PY) -m pytest -q -rs -n 2 --dist loadfile --no-loadscope-reorder \
		-m "not slow and not engine" -p no:cacheprovider --ignore=tests/unit tests
	$(PY) -m pytest -q -rs -m "engine and not slow" -p no:cacheprovider tests

# promtool, prometheus and blackbox_exporter for tests/prometheus: installed with
# apt when missing (as root); where that cannot be done, it says what to install.
.PHONY: prometheus-tools
prometheus-tools:
	sh tools/prometheus-tools.sh

# Real-vLLM tier: a cached engine environment (.cache/vllm-env-<pins hash>/) and tiny models.
engine-env: $(STAMP)
	$(PY) -m chaos.vllm_engine.env

# The same build, started in the background (output in .cache/engine-env.out), then
# the oldest release's (tests/engine/test_oldest_release.py; text model only); each
# engine test waits for its environment on its lock, so lint and the fast tiers overlap them.
OLDEST_RELEASE ?= 0.10.2
engine-env-bg: $(STAMP)
	@mkdir -p .cache
	@(($(PY) -m chaos.vllm_engine.env; $(PY) -m chaos.vllm_engine.env --release $(OLDEST_RELEASE) --models text) > .cache/engine-env.out 2>&1 &)

engine: engine-env
	$(PY) -m pytest -q -m engine tests/engine tests/contract

# vLLM compatibility: one engine environment per release line
# (.cache/vllm-env-<release>-<key>/; chaos/vllm_engine/env.py says why these lines),
# then sentinel with its shipped defaults against each release's live server (one at a
# time): startup, signals, priority, slow decode, engine hang, SIGSTOP. Prints the
# table and writes docs/compat.md; per-release reports in .cache/compat/matrix-*.json.
# The facts probe per release: python -m chaos.vllm_engine.compat --release X.
COMPAT_RELEASES ?= 0.32.0 0.29.0 0.27.1 0.20.2 0.10.2
.PHONY: compat
compat: $(STAMP)
	for r in $(COMPAT_RELEASES); do $(PY) -m chaos.vllm_engine.env --release $$r --models text || exit 1; done
	$(PY) -m chaos.vllm_engine.matrix $(foreach r,$(COMPAT_RELEASES),--release $(r)) --table

bench-sim: $(STAMP)
	$(PY) -m tests.bench.bench_sim_capacity

# Chaos scenarios: the full set (simulator, then real vLLM with sentinel's shipped defaults);
# report in reports/chaos/latest/, table and plot for the README in docs/chaos/.
chaos: engine-env
	$(PY) -m chaos run chaos/scenarios/*.yaml --docs docs/chaos

# The simulator-only set: a few minutes, no real vLLM; its table in docs/chaos/sim-report.md.
chaos-sim: $(STAMP)
	$(PY) -m chaos run chaos/scenarios/sim-*.yaml --docs docs/chaos --docs-name sim-report

# The restart loop: the faults under the harness's kubelet, which really restarts the
# server, once per checker its liveness follows (docs/chaos/supervised.md). The
# simulator set takes about half an hour; the real-vLLM set watches ten minutes after each
# recovery (sentinel only; CHECKERS=sentinel,vllm_health,naive,blackbox for all).
SUPERVISED_SIM := engine-hang sigstop-engine sigstop-api sigkill-engine api-wedge
CHECKERS ?= sentinel
.PHONY: chaos-supervised chaos-supervised-sim
chaos-supervised-sim: $(STAMP)
	$(PY) -m chaos supervise $(foreach s,$(SUPERVISED_SIM),chaos/scenarios/sim-$(s).yaml) \
		--watch-after 30
chaos-supervised: engine-env
	$(PY) -m chaos supervise $(foreach s,engine-hang sigstop-engine sigstop-api sigkill-engine,\
		chaos/scenarios/vllm-$(s).yaml) --checkers $(CHECKERS)

# Recovery side by side (a benchmark, outside make test): RUNS runs per checker, every
# checker, medians and spreads written into docs/chaos/supervised.md by the command itself.
# The simulator's three scenarios take about 40 min; the real-vLLM engine hang about 2 h.
RUNS ?= 3
ALL_CHECKERS := sentinel,naive,vllm_health,blackbox
.PHONY: chaos-supervised-runs chaos-supervised-runs-sim
chaos-supervised-runs-sim: $(STAMP)
	$(PY) -m chaos supervise $(foreach s,engine-hang sigstop-engine sigstop-api,\
		chaos/scenarios/sim-$(s).yaml) --checkers $(ALL_CHECKERS) --runs $(RUNS) \
		--watch-after 30 --docs docs/chaos/supervised.md --docs-section sim-runs
chaos-supervised-runs: engine-env
	$(PY) -m chaos supervise chaos/scenarios/vllm-engine-hang.yaml --checkers $(ALL_CHECKERS) \
		--runs $(RUNS) --watch-after 60 --docs docs/chaos/supervised.md --docs-section vllm-runs

bench: $(STAMP)
	$(PY) -m tests.bench.bench_sentinel

# Detection with sentinel as uid 10001 and as root beside a root simulator: SIGSTOP of the
# engine 5 times (p95), of the API server, the listener closing for good. About a minute.
.PHONY: bench-nonroot
bench-nonroot: $(STAMP)
	$(PY) -m tests.bench.bench_nonroot $(ARGS)

# sentinel's shipped defaults against one real vLLM 0.32 server: engine-hang detection
# three times (median; goal 15 s), slow decode near 0.5 token/s for 3 minutes (0 liveness
# failures), SIGSTOP of EngineCore. About 12 minutes on two cores.
.PHONY: bench-vllm
bench-vllm: engine-env
	$(PY) -m tests.bench.bench_vllm_detection $(ARGS)

# Detection time per hang shape (idle engine hang, a request stuck in the batch, a decode
# stall after the first token under streamed load, SIGSTOP of EngineCore): median and worst
# seconds from the fault to /livez 503, a fresh sidecar per round; goals of issue 32.
# bench-detection: the simulator, 5 rounds (about 5 minutes); bench-detection-vllm: one
# real vLLM 0.32 server, 3 rounds (about 3 minutes on two cores). Exit 1 only if a round broke.
.PHONY: bench-detection bench-detection-vllm
bench-detection: $(STAMP)
	$(PY) -m tests.bench.bench_detection --target sim $(ARGS)
bench-detection-vllm: engine-env
	$(PY) -m tests.bench.bench_detection --target vllm $(ARGS)

# The correctness canary on a real vLLM: 64 concurrent streams for 10 minutes with no
# corrupt verdict, then weights corrupted in place (zero, nan) red within 60 s; about
# 13 minutes (ARGS=--quick: 2 minutes of load).
.PHONY: bench-correctness
bench-correctness: engine-env
	$(PY) -m tests.bench.bench_correctness $(ARGS)

# What sentinel costs its pod with shipped defaults: RSS, CPU share, /livez latency
# (open loop), time to /livez; about 12 minutes (ARGS=--quick: about 2.5).
.PHONY: bench-footprint
bench-footprint: $(STAMP)
	$(PY) -m tests.bench.bench_footprint $(ARGS)

# /livez as shipped (issue 41): sentinel unpinned beside an engine of 2 busy threads per core,
# cgroup v1 cpu.shares as the 250m request gives them where writable (root), fresh connections
# at 200/s; p99.9 < 100 ms, 0 answers over 1 s. 10 minutes (ARGS="--duration 60": about 1.5).
# Run it alone: other work on the machine weighs on the figure (docs/footprint.md).
.PHONY: bench-livez-shipped
bench-livez-shipped: $(STAMP)
	$(PY) -m tests.bench.bench_livez_shipped $(ARGS)

# Peak RSS and /livez p99 of a fresh sentinel against each hostile target case
# (tests/hostile_target.py); goal 150 MB and 10 ms. Then a bundle captured while
# /metrics is 60 MB (tests/bench/bench_capture.py). About 6 minutes.
.PHONY: bench-hostile
bench-hostile: $(STAMP)
	$(PY) -m tests.bench.bench_hostile $(ARGS)
	$(PY) -m tests.bench.bench_capture

# sentinel exporter: peak RSS probing each hostile target case, then 200 probes sent
# at once over 50 simulated vLLMs with a 10 s scrape timeout (docs/exporter.md).
# About 2 minutes.
.PHONY: bench-exporter
bench-exporter: $(STAMP)
	$(PY) -m tests.bench.bench_exporter $(ARGS)

# A pool at its admission cap (issue 30): 8 simulated replicas (--max-num-queued-reqs 4), each
# with its own sentinel (shipped defaults), loaded past the cap for 5 minutes behind the exporter
# and a real Prometheus with the shipped fleet rules; /readyz and /livez polled every second, the
# most replicas unready at once. About 6 minutes (ARGS="--duration 60": about 2.5).
.PHONY: bench-fleet-admission
bench-fleet-admission: $(STAMP)
	$(PY) -m tests.bench.bench_fleet_admission $(ARGS)

# The release radar: a vLLM release's routes, middleware bodies, metric families, process
# titles and flags, read from its wheel with ast (downloaded into .cache/vllm-radar, never
# installed), against what sentinel knows (chaos/vllm_radar/known.py), since BASE (default:
# the release before). About a minute per release not yet cached. Output: docs/compat-notes.md.
.PHONY: vllm-radar
vllm-radar: $(STAMP)
	@test -n "$(VERSION)" || (echo "usage: make vllm-radar VERSION=0.34.0 [BASE=0.33.0]" >&2; exit 2)
	$(PY) -m chaos.vllm_radar $(VERSION) $(if $(BASE),--base $(BASE))

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
