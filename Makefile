# tokscan — `make demo` and `make test` are the whole set-up on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export CARGO_TERM_COLOR ?= never

.PHONY: help venv build browser demo test test-rust test-python lint fmt fuzz bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

# Python dependencies come from pyproject.toml (one list): the demo needs the runtime and `tokenizer` extra,
# the tests and lint the `dev` extra on top.
deps = $(shell python3 -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	print(" ".join(repr(d) for d in [*p["dependencies"], *(x for e in sys.argv[1:] for x in p["optional-dependencies"][e])]))' $(1))

$(VENV)/.runtime: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "maturin>=1.5,<2" $(call deps,tokenizer)
	touch $@

$(VENV)/.dev: $(VENV)/.runtime
	$(PY) -m pip install --quiet $(call deps,tokenizer dev)
	touch $@

venv: $(VENV)/.runtime ## create the virtualenv with what the demo needs (runtime + tokenizer extra)

build: venv ## build the extension (release) into the virtualenv
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(BIN)):$$PATH $(BIN)/maturin develop --release --quiet

demo: build ## write the demo corpus and scan it
	$(BIN)/tokscan demo demo-out

test-rust: ## Rust unit and property tests of the core (with the prompt encoder the extension builds in)
	cargo test -p tokscan-core --release --features prompt

browser: ## headless Chromium for the HTML report test (Debian package; skipped without root)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium not installed: the browser test will be skipped"; }

test-python: build $(VENV)/.dev browser ## end-to-end pytest suite
	$(BIN)/pytest -q tests

test: test-rust test-python ## everything CI runs

lint: $(VENV)/.dev ## rustfmt, clippy -D warnings, ruff, the _core.pyi stub against the built extension
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(BIN)/ruff check python tests benches
	$(BIN)/ruff format --check python tests benches
	$(MAKE) build
	$(BIN)/python -m mypy.stubtest tokscan._core

fmt: $(VENV)/.dev ## format Rust and Python
	cargo fmt --all
	$(BIN)/ruff format python tests benches
	$(BIN)/ruff check --fix python tests benches

fuzz: ## stable-toolchain fuzzing of every reader and the checker (FUZZ_CASES, default 200000 per target)
	TOKSCAN_FUZZ_CASES=$${FUZZ_CASES:-200000} timeout $${FUZZ_SECONDS:-900} cargo test --release -p tokscan-core --test fuzz

bench: build ## full benchmark (DuckDB, polars, numpy baselines; corpus cached in ~/.cache/tokscan-bench)
	$(PY) -m pip install --quiet duckdb polars zstandard "ray>=2.30,<3"
	$(PY) benches/bench.py --scaling --json benches/results.json
	$(PY) benches/loader.py --json benches/loader-results.json
	$(PY) benches/ray_scan.py --json benches/ray-results.json

clean: ## remove build output and the virtualenv
	cargo clean
	rm -rf $(VENV) demo-out
