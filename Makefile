# tokscan — `make demo` and `make test` are the whole set-up on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export CARGO_TERM_COLOR ?= never

.PHONY: help venv build browser demo disk test test-rust test-python lint fmt docs reference fuzz bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/; s/\$$\(PROFILE\)/$(PROFILE)/g'

# The interpreter the virtualenv is made from: any Python >= 3.10 (`make test PYTHON=python3.10`).
PYTHON ?= python3
# pip installs without compiling every module to bytecode (305 MB of .py in the dev environment, most never
# imported: ~50 s of one core while the Rust build needs both); Python compiles what is imported, once, into
# __pycache__, so nothing here may forbid writing it.
PIP = $(PY) -m pip
PIP_INSTALL = $(PIP) install --quiet --no-compile
unexport PYTHONDONTWRITEBYTECODE
# No wheel cache: the dev extra's torch is a CUDA build (torch + nvidia-* + triton: ~5 GB installed from ~3.5 GB
# of wheels), and a cache kept them all a second time on a machine that also holds the Rust build (~1.5 GB). A CI
# run once stopped on "No space left on device" in this install; `disk` below says what is needed up front.
export PIP_NO_CACHE_DIR = 1
# What `make test` needs free where the virtualenv and target/ live, in GB: virtualenv 6.3, the wheels while they
# install 3.5, target/ 1.5, the test suite's temporary corpora ~1.5.
DISK_GB ?= 13
# Property tests and fuzzers draw the same cases on every run of `make test`, so that CI answers the same twice
# (a clean clone once met a Parquet page that panicked parquet-rs on one random draw). `make fuzz` draws a new
# sequence each time and prints its seed; replay one with `make test-rust PROPTEST_RNG_SEED=<seed>`, and hunt
# in the Python suite with `HYPOTHESIS_PROFILE=slow`.
PROPTEST_RNG_SEED ?= 1892010519
export PROPTEST_RNG_SEED

# Python dependencies come from pyproject.toml (one list), read by tools/requirements.py on every supported
# Python: the demo needs the runtime and `tokenizer` extra, the tests and lint the `dev` extra on top, the docs
# site the `docs` extra (the tests build it too). Each marker is touched only when its recipe succeeded; a
# virtualenv without one is half-made and is recreated.
$(VENV)/.runtime: pyproject.toml tools/requirements.py
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10) and "tokscan needs Python >= 3.10; $(PYTHON) is " + sys.version.split()[0] + " (make PYTHON=python3.X)")'
	[ -f $@ ] || $(PYTHON) -m venv --clear $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PY) tools/requirements.py tokenizer > $(VENV)/requirements-runtime.txt
	$(PIP_INSTALL) "maturin>=1.5,<2" -r $(VENV)/requirements-runtime.txt
	touch $@

$(VENV)/.dev: $(VENV)/.runtime
	@$(MAKE) --no-print-directory disk
	$(PY) tools/requirements.py tokenizer dev docs > $(VENV)/requirements-dev.txt
	$(PIP_INSTALL) -r $(VENV)/requirements-dev.txt
	touch $@

$(VENV)/.docs: $(VENV)/.runtime
	$(PY) tools/requirements.py docs > $(VENV)/requirements-docs.txt
	$(PIP_INSTALL) -r $(VENV)/requirements-docs.txt
	touch $@

venv: $(VENV)/.runtime ## create the virtualenv with what the demo needs (runtime + tokenizer extra)

# The Cargo profile `make` builds in (Cargo.toml): `fast` has the release optimizations without fat LTO, so the
# demo, the Rust tests and the extension the Python tests load share one compilation of the dependencies (~5.5 min
# on 2 cores from scratch, the extension then ~20 s; fat LTO took ~8 + 4 min). `make bench` and a wheel
# (`maturin build --release`, `pip install .`) use `release`, with fat LTO. Clippy checks in the same profile and
# so reuses the build scripts and proc-macros; the dependencies' metadata is cargo's own unit of `check`, made
# once after a build (~200 crates, ~2.4 min on 2 cores; in `dev`, 283 units from scratch, ~2.8 min).
PROFILE ?= fast
# PIP_QUIET: maturin installs the package's dependencies with pip, which otherwise prints a line per requirement
# (~28 "Ignoring ...: markers" and "Requirement already satisfied" lines on every build).
MATURIN_DEVELOP = PIP_QUIET=1 VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(BIN)):$$PATH $(BIN)/maturin develop --quiet
build: venv ## build the extension into the virtualenv (Cargo profile $(PROFILE))
	$(MATURIN_DEVELOP) --profile $(PROFILE)

demo: build ## write the demo corpus and scan it
	$(BIN)/tokscan demo demo-out

# With tokscan-py named (it has no tests), dependency features resolve as for the extension, so the tests reuse
# `make build`'s compiled arrow/parquet/core (same profile) instead of compiling them again.
# cargo gets no jobserver from `make -j` (it keeps its own parallelism; rustdoc warned about the closed descriptors).
test-rust: export MAKEFLAGS =
test-rust: ## Rust unit and property tests of the core (with the prompt encoder the extension builds in)
	cargo test --profile $(PROFILE) -p tokscan-core -p tokscan-py

browser: ## headless Chromium for the HTML report test (Debian package; skipped without root)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium not installed: the browser test will be skipped"; }

# One pytest worker per core plus one (pytest-xdist): the suite waits on subprocesses and Ray a fifth of the time,
# and a third worker fills it (2 cores: 195 s with 2 workers, 182 s with 3, 207 s with 4).
# `make test-python PYTEST_WORKERS=0` runs them in this process.
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test-python: build $(VENV)/.dev browser ## end-to-end pytest suite
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) tests

disk: ## warn when the disk holding the checkout has less free space than the dev set-up needs (DISK_GB)
	@free=$$(df -Pk . | awk 'NR==2 {print int($$4 / 1048576)}'); \
	if [ "$$free" -lt $(DISK_GB) ]; then \
		echo "warning: $$(pwd) has $$free GB free; the dev virtualenv (torch's CUDA wheel), target/ and the tests need ~$(DISK_GB) GB"; \
	fi

# The Rust compile (CPU), the virtualenv's pip installs and chromium's apt-get (mostly download) run side by side;
# the extension then reuses the compiled dependencies, and pytest runs last.
test: ## everything CI runs
	$(MAKE) -j3 test-rust $(VENV)/.dev browser
	$(MAKE) test-python

lint: $(VENV)/.dev ## rustfmt, clippy -D warnings, ruff, the _core.pyi stub against the built extension
	cargo fmt --all --check
	cargo clippy --profile $(PROFILE) --workspace --all-targets -- -D warnings
	$(BIN)/ruff check python tests benches tools
	$(BIN)/ruff format --check python tests benches tools
	$(MAKE) build
	$(BIN)/python -m mypy.stubtest tokscan._core

fmt: $(VENV)/.dev ## format Rust and Python
	cargo fmt --all
	$(BIN)/ruff format python tests benches tools
	$(BIN)/ruff check --fix python tests benches tools

# The docs site needs no build of the extension: its generated tables (docs/reference/) are checked by the test
# suite and written by `make reference`. mkdocs.yml's `strict` and `validation` make a link to a missing page or
# anchor, or a page left out of the nav, fail the build; external links are not followed (CI has no network).
docs: $(VENV)/.docs ## build the docs site into site/ (mkdocs --strict: a broken link or anchor fails)
	$(BIN)/mkdocs build --strict --site-dir site

reference: build ## write docs/reference/'s generated tables from the core (tokscan codes --markdown / --report-schema)
	$(PY) tools/reference.py

fuzz: ## stable-toolchain fuzzing of every reader and the checker (FUZZ_CASES, default 200000 per target)
	seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); echo "fuzzing with PROPTEST_RNG_SEED=$$seed"; \
	PROPTEST_RNG_SEED=$$seed TOKSCAN_FUZZ_CASES=$${FUZZ_CASES:-200000} timeout $${FUZZ_SECONDS:-900} \
		cargo test --profile $(PROFILE) -p tokscan-core -p tokscan-py --test fuzz

bench: venv ## full benchmark (DuckDB, polars, numpy baselines; corpus cached in ~/.cache/tokscan-bench), fat-LTO build
	$(MATURIN_DEVELOP) --release
	$(PY) -m pip install --quiet duckdb polars zstandard "ray>=2.30,<3"
	$(PY) benches/bench.py --scaling --json benches/results.json
	$(PY) benches/loader.py --json benches/loader-results.json
	$(PY) benches/ray_scan.py --json benches/ray-results.json

clean: ## remove build output and the virtualenv
	cargo clean
	rm -rf $(VENV) demo-out site
