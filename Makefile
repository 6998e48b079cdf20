# Two commands on a fresh machine: `make demo` and `make test`. Each installs what it needs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEB_PACKAGES := kcat haproxy prometheus chromium

.PHONY: test demo lint typecheck unit integration deps clean bench-observe bench-analyze load soak fuzz bench-proxy \
	bench-memory bench-codec profile-proxy

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

deps: $(STAMP)
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check protocol proxy metrics tests bench analysis deploy perf

typecheck: $(STAMP)
	$(BIN)/mypy protocol metrics proxy analysis perf

unit: $(STAMP)
	$(BIN)/pytest -q -m "not integration"

integration: deps
	$(BIN)/pytest -q -m integration

test: deps lint typecheck
	$(BIN)/pytest -q -p no:cacheprovider

demo: deps
	$(BIN)/fetchlat demo

clean:
	rm -rf $(VENV) build *.egg-info

bench-observe: $(STAMP)
	$(BIN)/python bench/bench_decode_model.py --seconds 3

bench-analyze: $(STAMP)
	$(BIN)/python bench/bench_analyze.py --rows 10000000 --repeat 3

bench-proxy: deps
	$(BIN)/python bench/bench_proxy.py --trials 5 --out bench-proxy.json

bench-memory: deps
	$(BIN)/python bench/memory.py --connections 200 --seconds 30 --response-mb 50

bench-codec: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider bench/codec --benchmark-enable --benchmark-only --benchmark-columns=min,median,mean,ops,rounds

profile-proxy: deps
	$(BIN)/python bench/profile_proxy.py --records 100000 --out bench-profile

# Reliability runs (not part of make test; figures in docs/reliability.md)
load: $(STAMP)
	$(BIN)/python bench/load_connections.py --connections 1000 --seconds 60

soak: $(STAMP)
	$(BIN)/python bench/soak.py --seconds 300

FUZZ_SECONDS ?= 300
$(VENV)/.fuzz: $(STAMP)
	$(BIN)/pip install -q -e '.[test,fuzz]'
	touch $@

fuzz: $(VENV)/.fuzz
	$(BIN)/python tests/fuzz/run_atheris.py --seconds $(FUZZ_SECONDS)
