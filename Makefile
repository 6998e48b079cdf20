# Two commands on a fresh machine: `make demo` and `make test`. Each installs what it needs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
COMPILED := $(VENV)/.compiled
# the folders pyproject maps into the fetchlat package (docs/architecture.md draws them)
PACKAGES := protocol metrics proxy capture analysis verify perf embedded app native
HOT_SOURCES := setup.py $(wildcard protocol/*.py metrics/*.py proxy/*.py native/*.py native/src/*.rs native/src/*/*.rs native/build/*.rs) \
	native/build.rs native/Cargo.toml protocol/specs/FetchResponse.json protocol/specs/ProduceRequest.json
# rustup's cargo, for a shell that never sourced ~/.cargo/env (the native core's build)
export PATH := $(HOME)/.cargo/bin:$(PATH)
# python3-venv: stock Debian's python3 makes no venv without it; python3-dev: without the headers
# the hot path is not compiled (it runs as Python, and says so)
DEB_PACKAGES := kcat haproxy prometheus chromium tcpdump tshark python3-venv python3-dev
# Commands the build and the tests run, each with the Debian package that brings it when it is
# missing: the release's Java (17 on bookworm, 21 on trixie) with its compiler (Spark, Apache
# Kafka, the Java client's scenarios run as source files), Maven (Kafka's jars), Node.js and npm
# (the KafkaJS tests), a C compiler (mypyc's hot path, and the linker the Rust core needs)
TOOLS := javac:default-jdk-headless mvn:maven node:nodejs npm:npm gcc:gcc
# The native core's Rust: a cargo at least as new as native/Cargo.toml's rust-version, else
# Debian's newer toolchain where the release has one (bookworm: rustc-web and cargo-web, whose
# cargo is new enough where the plain cargo package is not), else Debian's cargo; and the clippy
# of that toolchain (make lint). Without a new enough one the install builds the compiled road and
# says why (setup.py).

.PHONY: debs cargo-test docker-base image-ca image test-fresh-debian test test-long test-pure demo lint typecheck unit integration deps clean bench-observe bench-analyze load soak fuzz bench-proxy bench-proxy-full \
	bench-memory bench-instr bench-codec bench-walk bench-spike bench-gil profile-proxy bench-core bench-rate bench-accuracy profile-api bench-pcap bench-scale bench-prune bench-incremental

$(BIN)/python: | debs
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	FETCHLAT_PURE_PYTHON=1 $(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# The hot path compiled with mypyc and the native core built with cargo (setup.py), rebuilt
# whenever a source changes. Without a C compiler, or with FETCHLAT_PURE_PYTHON=1, the same
# sources run as Python; without cargo, the compiled build runs without the native core; it says which.
$(COMPILED): $(STAMP) $(HOT_SOURCES) | debs
	$(BIN)/pip install -q --no-deps -e . > $(VENV)/compile.log 2>&1 || (tail -40 $(VENV)/compile.log; exit 1)
	$(BIN)/python -c "from fetchlat.proxy.build import hot_path as h, hot_path_reason as r; print('hot path:', h(), '-', r())"
	touch $@

# Apache Kafka's jars (embedded/kafka-pom.xml names the version), fetched through Maven once
KAFKA_JARS := $(or $(FETCHLAT_KAFKA_CACHE),$(HOME)/.cache/fetchlat)/kafka-$(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' embedded/kafka-pom.xml)/libs/.complete
$(KAFKA_JARS): embedded/kafka-pom.xml | $(STAMP) debs
	$(BIN)/python -c "from fetchlat.embedded import kafka; print('Apache Kafka', kafka.VERSION, 'in', kafka.ensure_jars())"

# KafkaJS for the client tests (tests/integration/clients/package-lock.json pins it), from npm
NODE_CLIENTS := tests/integration/clients/node_modules/.package-lock.json
$(NODE_CLIENTS): tests/integration/clients/package.json tests/integration/clients/package-lock.json | debs
	cd tests/integration/clients && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The Debian packages and the commands above, installed when missing (root; tests/test_makefile.py
# runs this recipe on a machine made to lack them)
debs:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	for t in $(TOOLS); do command -v $${t%%:*} >/dev/null 2>&1 || missing="$$missing $${t#*:}"; done; \
	need=""; while read -r key eq value; do [ "$$key" = rust-version ] && need=$${value#\"} && need=$${need%\"}; \
	done < native/Cargo.toml; \
	set -- $$(cargo --version 2>/dev/null); have=$${2:-}; \
	if [ -z "$$have" ] || ! dpkg --compare-versions "$$have" ge "$$need" 2>/dev/null; then \
	  if apt-cache show cargo-web >/dev/null 2>&1; then rust="rustc-web cargo-web"; clippy=rust-web-clippy; \
	  else rust=cargo; clippy=rust-clippy; fi; \
	  missing="$$missing $$rust"; \
	elif ! cargo clippy --version >/dev/null 2>&1; then \
	  if dpkg -s cargo-web >/dev/null 2>&1; then clippy=rust-web-clippy; else clippy=rust-clippy; fi; \
	fi; \
	if [ -n "$${clippy:-}" ] && apt-cache show $$clippy >/dev/null 2>&1; then missing="$$missing $$clippy"; fi; \
	if [ -n "$$missing" ] && [ "$$(id -u 2>/dev/null || echo 0)" != 0 ]; then \
	  echo "make needs root to install these Debian packages:$$missing"; \
	  echo "run it as root (sudo make ...), or install them and run make again"; exit 1; \
	fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# The sidecar image (deploy/docker/Dockerfile), the fast road in it: Docker and mmdebstrap from
# Debian's packages and the daemon started where none runs (root); the Dockerfile's Debian base
# pulled, or made from Debian's packages where no registry gives it (mmdebstrap, tagged as the
# base); the host's extra certificate authorities (an intercepting proxy's) in build/image-ca/,
# which only the build stage copies. `make image IMAGE=name:tag`.
IMAGE ?= fetchlat:dev
# a bare Debian release ($1) made from Debian's packages alone, tagged $2
debian_base = mmdebstrap --quiet --variant=minbase $(1) - | docker import - $(2) >/dev/null
IMAGE_BASE = $(shell sed -n 's/^ARG BASE=//p' deploy/docker/Dockerfile)
docker-base:
	@if ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then \
	  if [ "$$(id -u 2>/dev/null || echo 0)" != 0 ]; then echo "make needs root to install docker.io and mmdebstrap"; exit 1; fi; \
	  echo "installing Debian packages: docker.io mmdebstrap"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io mmdebstrap >/dev/null; \
	fi
	@if ! docker info >/dev/null 2>&1; then \
	  echo "starting dockerd (its log: build/dockerd.log)"; mkdir -p build; \
	  (setsid dockerd >build/dockerd.log 2>&1 &); \
	  for i in $$(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done; \
	  docker info >/dev/null 2>&1 || { tail -20 build/dockerd.log; exit 1; }; \
	fi
	@docker image inspect $(IMAGE_BASE) >/dev/null 2>&1 || timeout 60 docker pull -q $(IMAGE_BASE) >/dev/null 2>&1 || { \
	  echo "no registry gives $(IMAGE_BASE): making it from Debian's packages (mmdebstrap bookworm)"; \
	  $(call debian_base,bookworm,$(IMAGE_BASE)); \
	  made=$$(docker run --rm $(IMAGE_BASE) cat /etc/debian_version); \
	  case "$(IMAGE_BASE)" in *:$$made-slim) ;; *) echo "note: the mirror's bookworm is $$made, tagged $(IMAGE_BASE)";; esac; }

# the host's extra certificate authorities, for what a container fetches (the image's build
# stage, the fresh Debian below); none where the host trusts only Debian's own
image-ca:
	@rm -rf build/image-ca && mkdir -p build/image-ca && \
	  for c in /usr/local/share/ca-certificates/*.crt; do if [ -e "$$c" ]; then cp "$$c" build/image-ca/; fi; done

image: docker-base image-ca
	docker build -f deploy/docker/Dockerfile --build-arg BASE=$(IMAGE_BASE) -t $(IMAGE) .

# `make test` as a new user runs it: a clean clone of this checkout's HEAD in a container of a
# bare Debian (git, make and python3 added first), as root, with no rustup; the Makefile installs
# the rest from Debian's packages, and the container trusts build/image-ca as the host does.
# DEBIAN=bookworm (the default: the Dockerfile's base) or another release (trixie), made from
# Debian's packages with mmdebstrap. Prints the install's road and how long make test took; the
# log: build/fresh-debian-<release>.log.
DEBIAN ?= bookworm
FRESH_BASE = $(if $(filter bookworm,$(DEBIAN)),$(IMAGE_BASE),fetchlat-debian:$(DEBIAN))
test-fresh-debian: docker-base image-ca
	@docker image inspect $(FRESH_BASE) >/dev/null 2>&1 || { \
	  echo "making $(FRESH_BASE) from Debian's packages (mmdebstrap $(DEBIAN))"; \
	  $(call debian_base,$(DEBIAN),$(FRESH_BASE)); }
	testkit/fresh_debian.sh $(FRESH_BASE) build/image-ca build/fresh-debian-$(DEBIAN).log

deps: debs $(COMPILED) $(KAFKA_JARS) $(NODE_CLIENTS)
	@for t in $(TOOLS); do printf '%s: %s\n' $${t%%:*} "$$(command -v $${t%%:*})"; done

# the native core's own checks, linking libpython (the module itself links none): clippy at the
# oldest Rust it builds with (Cargo.toml's rust-version), and its tests (unit and property tests
# of the digest, its layouts and the wire; the relay's state machine over loopback sockets)
CARGO_CHECK := cd native && PYO3_PYTHON=$(abspath $(BIN)/python) cargo
lint: $(STAMP) | debs
	$(BIN)/ruff check $(PACKAGES) tests testkit bench deploy setup.py
	@if cargo clippy --version >/dev/null 2>&1; then \
	  $(CARGO_CHECK) clippy --release --no-default-features --all-targets --locked -q -- -D warnings; \
	else echo "clippy: not installed with this cargo; the native core's lint did not run"; fi

cargo-test: $(STAMP) | debs
	$(CARGO_CHECK) test --release --no-default-features --locked -q

# mypy reads the packages as fetchlat.* (a tree of links under build/typecheck), so the types
# of every import between them are checked, as the installed package resolves them
typecheck: $(STAMP)
	rm -rf build/typecheck && mkdir -p build/typecheck/fetchlat
	for p in $(PACKAGES); do ln -s ../../../$$p build/typecheck/fetchlat/$$p; done
	cd build/typecheck && $(abspath $(BIN))/mypy --config-file ../../pyproject.toml $(addprefix -p fetchlat.,$(PACKAGES))

unit: $(STAMP)
	$(BIN)/pytest -q -m "not integration"

integration: deps
	$(BIN)/pytest -q -m integration

# The whole suite on the build `make` installed (compiled here), then the pure-Python build's
# own run of everything that does not start processes (the integration tests run on both in
# `make test-pure`); tests/test_builds_agree.py compares the two builds output for output. The
# analysis tests run once: the analysis is Spark's and has no compiled twin (of the compiled
# modules it reads only the vocabulary's names), so a second run would test the same code again.
# The tests that start no broker or proxy run on both cores (pytest-xdist); the integration tests one
# at a time, since many judge a proxy's timing against a broker's clock on the same two cores.
test: deps lint typecheck cargo-test
	$(BIN)/pytest -q -p no:cacheprovider --durations=12 -n 2 -m "not integration and not long"
	$(BIN)/pytest -q -p no:cacheprovider --durations=12 -m "integration and not long"
	FETCHLAT_PURE_PYTHON=1 $(BIN)/pytest -q -p no:cacheprovider -n 2 -m "not integration and not long" \
	  --ignore=tests/analysis

# The long Apache Kafka cases (failover, fetch from follower, two share consumers): ~3.5 min more
test-long: deps
	$(BIN)/pytest -q -p no:cacheprovider -m long

test-pure: deps
	FETCHLAT_PURE_PYTHON=1 $(BIN)/pytest -q -p no:cacheprovider

# make demo BROKER=kafka: the same demo on a 3-broker Apache Kafka cluster, a sidecar per broker
demo: deps
	$(BIN)/fetchlat demo $(if $(BROKER),--broker $(BROKER))

clean:
	rm -rf $(VENV) build *.egg-info protocol/*.so metrics/*.so proxy/*.so protocol/hot_sources.json

bench-observe: $(STAMP)
	$(BIN)/python bench/bench_decode_model.py --seconds 3

bench-analyze: $(STAMP)
	$(BIN)/python bench/bench_analyze.py --rows 10000000 --repeat 3

bench-scale: $(STAMP)
	FETCHLAT_SHUFFLE_PARTITIONS=64 $(BIN)/python bench/bench_scale.py --rows 100000000 --worker-memory 5g

bench-prune: $(STAMP)
	$(BIN)/python bench/bench_prune.py --rows 12000000 --hours 24

bench-incremental: $(STAMP)
	$(BIN)/python bench/bench_incremental.py --rows 12500000 --hours 25

# the paths the goals name (haproxy, the default road with and without traces, TLS to the
# clients: haproxy terminating it, the default road traced, round trips alone; and a central
# proxy on the default road, traced, plaintext and TLS: on Tansu it routes and rewrites its
# addresses), three
# interleaved trials on Tansu, 20 000 records a throughput phase (the full run's 100 000);
# bench-proxy-full: every path on both brokers, five trials (hours). Each prints how long it
# took at its end.
bench-proxy: deps
	$(BIN)/python bench/bench_proxy.py --trials 3 --broker tansu --records 20000 \
	  --paths haproxy,fetchlat-relay,fetchlat-relay+traces,haproxy-tls,fetchlat-relay-tls+traces,fetchlat-relay-central+traces,fetchlat-relay-central-tls+traces \
	  --out bench-proxy.json

bench-proxy-full: deps
	$(BIN)/python bench/bench_proxy.py --trials 5 --broker both --out bench-proxy-full.json

bench-memory: deps
	$(BIN)/python bench/memory.py --connections 200 --seconds 30 --response-mb 50

bench-codec: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider bench/codec --benchmark-enable --benchmark-only --benchmark-columns=min,median,mean,ops,rounds

bench-walk: deps
	$(BIN)/python bench/batch_walk.py

# the native core's language, Rust (PyO3) against Cython, on the same walk (Cython from PyPI, here only)
bench-spike: deps
	$(BIN)/pip install -q cython
	$(BIN)/python bench/native_spike.py

bench-gil: deps
	$(BIN)/python bench/scrape_gil.py

# instructions per small round trip under valgrind's callgrind (Debian's valgrind, installed when missing)
bench-instr: deps
	command -v valgrind >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null)
	$(BIN)/python bench/instr_round_trips.py

bench-core: deps
	$(BIN)/python bench/core_cost.py
	FETCHLAT_PURE_PYTHON=1 $(BIN)/python bench/core_cost.py

bench-rate: deps
	$(BIN)/python bench/request_rate.py --trials 3

bench-pcap: deps
	$(BIN)/python bench/pcap_speed.py --mb 300

bench-accuracy: deps
	$(BIN)/python bench/accuracy_under_load.py --rps 4000

profile-api: deps
	$(BIN)/python bench/profile_api.py

profile-proxy: deps
	$(BIN)/python bench/profile_proxy.py --records 100000 --out bench-profile

# Reliability runs (not part of make test; figures in docs/reliability.md)
load: deps  # the proxy as installed: the compiled road and the native core
	$(BIN)/python bench/load_connections.py --connections 1000 --seconds 60

BROKER ?= tansu
HOURS ?= 2
soak: deps  # make soak (Tansu, 5 min) | make soak BROKER=kafka HOURS=2 (3 Kafka brokers, faults)
ifeq ($(BROKER),kafka)
	$(BIN)/python bench/soak_kafka.py --hours $(HOURS) --out build/soak-kafka
else
	$(BIN)/python bench/soak.py --seconds 300
endif

FUZZ_SECONDS ?= 300
$(VENV)/.fuzz: $(STAMP)
	$(BIN)/pip install -q -e '.[test,fuzz]'
	touch $@

fuzz: $(VENV)/.fuzz
	$(BIN)/python tests/fuzz/run_atheris.py --seconds $(FUZZ_SECONDS)
