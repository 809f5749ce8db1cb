# agglab — two commands on a fresh Debian 12 / Ubuntu machine:
#   make experiment   # install what is missing, run the default experiment, write results/<name>/report.md
#   make test         # install what is missing, run the test suite
# Works as root or as a user with sudo (the Vagrant VM).

PY      := .venv/bin/python
SUDO    := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
BACKEND ?= soft
CONFIG  ?=
# CONFIG: a suite name under experiments/configs (default, quick) or any definition/suite file;
# unset: the backend's default suite (experiments/cli.py DEFAULT_SUITE)
PYTEST_ARGS ?=
# make bench: ONLY=sections (comma-separated), COMPARE=results/bench/X.json, BENCH_ARGS=any other option
ONLY       ?=
COMPARE    ?=
BENCH_ARGS ?=
# make test-busy: LOOPS busy loops beside the suite (tools/under_load.py)
LOOPS      ?= 2
# K: the program variant, values per packet (64, or the wide 256); passed on as AGGLAB_K
K       ?=
RUNENV  := $(if $(K),env AGGLAB_K=$(K),)
K_BUILD := $(or $(K),$(shell sed -n 's/^\#define AGG_K  *\([0-9]*\).*/\1/p' p4src/include/constants.p4))
# p4c on PATH, else a build under /opt/*/bin (as controller/switch_client.find_bmv2_tool looks)
P4C     ?= $(shell command -v p4c || ls /opt/*/bin/p4c 2>/dev/null | head -n 1)

.PHONY: setup test test-busy experiment calibrate bench clean p4gen p4 help

help:
	@echo "make experiment [BACKEND=soft|bmv2] [CONFIG=quick|FILE.yaml]  every paper trend -> results/<name>/report.md"
	@echo "                [K=256]                             any target: the wide program variant (256 int32 per packet)"
	@echo "make calibrate [BACKEND=soft|bmv2]                  measure this machine's fidelity ceiling for that backend"
	@echo "make test                                           run the tests"
	@echo "make test-busy [LOOPS=2]                            the CI run on a fresh clone of HEAD beside busy loops, with its load"
	@echo "make bench [ONLY=daemon,wire] [COMPARE=results/bench/X.json] [BENCH_ARGS=...]"
	@echo "                                                    speed figures vs targets, JSON in results/bench/"
	@echo "make clean                                          remove leftovers of crashed runs"
	@echo "make p4                                             compile p4src/ for BMv2 (p4c on PATH or /opt/*/bin) into build/p4/kK"
	@echo "make p4gen                                          regenerate p4src/include/values.p4 after changing AGG_K(_WIDE), and schemes.p4"

setup: .venv/.installed

.venv/.installed: pyproject.toml setup.py scripts/install-system.sh
	$(SUDO) bash scripts/install-system.sh
	[ -x $(PY) ] || /usr/bin/python3 -m venv --system-site-packages .venv
	$(PY) -m pip install -q -e '.[test]'
	touch $@

test: setup
	$(SUDO) $(RUNENV) $(PY) -m pytest -q $(PYTEST_ARGS)

test-busy: setup
	$(SUDO) $(PY) tools/under_load.py --loops $(LOOPS)

experiment: setup
	$(SUDO) $(RUNENV) $(PY) -m agglab.experiments $(CONFIG) --backend $(BACKEND)

calibrate: setup
	$(SUDO) $(RUNENV) $(PY) -m agglab calibrate --backend $(BACKEND)

bench: setup
	$(SUDO) $(RUNENV) $(PY) -m agglab.bench $(if $(ONLY),--only $(ONLY)) $(if $(COMPARE),--compare $(COMPARE)) $(BENCH_ARGS)

clean:
	$(SUDO) $(PY) -m agglab clean

p4gen:
	$(PY) -m agglab.p4gen

p4: p4gen
	@[ -n "$(P4C)" ] || { echo 'p4c not found (PATH or /opt/*/bin)' >&2; exit 2; }
	$(P4C) --target bmv2 --arch v1model -DAGG_K=$(K_BUILD) -o build/p4/k$(K_BUILD) p4src/agglab.p4
