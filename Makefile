# One command installs everything and runs all tests:  make test
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export STREAM_DEDUP_CACHE ?= $(HOME)/.cache/stream-dedup

.PHONY: install lock lint test test-unit helm kafka-start kafka-stop bench demo demo-shared sample readme-check readme clean

# Installs come from the lock files in requirements/ (exact versions and hashes), made by `make lock`:
#   uv.txt       the lock tool uv itself, installed by pip with --require-hashes
#   dev.lock     the package's dependencies with the test, bench and plot extras, and setuptools (make install, CI)
#   runtime.lock the dependencies alone, and setuptools (the Docker image)
# The package itself is then installed without its dependencies and without build isolation, so nothing
# unlocked is fetched.  LOCK_PYTHON is the oldest Python the lock must serve (requires-python).
UV := $(VENV)/bin/uv
LOCK_PYTHON ?= 3.10
LOCK_FLAGS := --universal --python-version $(LOCK_PYTHON) --generate-hashes --quiet --no-header --no-annotate

$(VENV)/bin/uv: requirements/uv.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r requirements/uv.txt
	touch $@

# Byte-compiled at install (uv does not by default): a process then starts without compiling numpy
# and the rest from source, which costs every run ~0.15 s where PYTHONDONTWRITEBYTECODE is set.
$(VENV)/.installed: pyproject.toml requirements/dev.lock $(VENV)/bin/uv
	$(UV) pip install -q --python $(PY) --require-hashes -r requirements/dev.lock
	$(UV) pip install -q --python $(PY) --no-deps --no-build-isolation -e .
	$(PY) -m compileall -q -j 0 $$($(PY) -c "import sysconfig; print(sysconfig.get_path('purelib'))") stream_dedup
	touch $@

# The kernels compiled ahead of time (numba pycc, this CPU): the engine then starts without
# importing numba. Rebuilt when a kernel source changes; without a C compiler the build says so
# and numba's JIT stays in use (see stream_dedup/jit.py).
AOT_INDEX := stream_dedup/_aot_kernels.json
$(AOT_INDEX): $(VENV)/.installed stream_dedup/jit.py stream_dedup/aot.py stream_dedup/kernels.py \
		stream_dedup/identity.py stream_dedup/passages.py stream_dedup/list_table.py stream_dedup/band_table.py \
		stream_dedup/simhash_table.py stream_dedup/candidate_rules.py stream_dedup/fingerprint_kernel.py \
		stream_dedup/record_store.py stream_dedup/decide_kernel.py stream_dedup/addresses.py stream_dedup/record_kernel.py \
		stream_dedup/event_kernel.py
	$(PY) -m stream_dedup.aot -q

install: $(VENV)/.installed $(AOT_INDEX)

# Refresh the lock files from pyproject.toml (needs PyPI); commit the result.
lock:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements/uv.in
	$(UV) pip compile $(LOCK_FLAGS) requirements/uv.in -o requirements/uv.txt
	$(UV) pip compile $(LOCK_FLAGS) pyproject.toml requirements/build.in --extra test --extra bench --extra plot \
		-o requirements/dev.lock
	$(UV) pip compile $(LOCK_FLAGS) pyproject.toml requirements/build.in -o requirements/runtime.lock
	$(PY) scripts/lock_stamp.py --write requirements/uv.txt requirements/dev.lock requirements/runtime.lock

lint: install
	$(VENV)/bin/ruff check stream_dedup tests bench scripts

helm:
	bash scripts/helm.sh

# The Kafka broker is started (and stopped) by the test session itself, see tests/conftest.py.
test: install lint helm
	HELM=$(STREAM_DEDUP_CACHE)/bin/helm $(PY) -m pytest -ra --durations=30

test-unit: install
	$(PY) -m pytest -ra -m "not kafka"

kafka-start:
	bash scripts/kafka.sh start

kafka-stop:
	bash scripts/kafka.sh stop

# The demo needs nothing but the clone: examples/news_sample.jsonl (see examples/README.md).
# The index lives in a temporary directory, so every demo run starts from an empty state.
SAMPLE ?= examples/news_sample.jsonl
demo: install
	mkdir -p out
	$(VENV)/bin/stream-dedup dedup $(SAMPLE) --out out/events.jsonl --report out/report.html

# The same on the larger shared stream (../shared/data, not part of the repository), with its quality score.
SHARED ?= ../shared/data
demo-shared: install
	mkdir -p out
	$(VENV)/bin/stream-dedup dedup $(SHARED)/news_stream.jsonl --out out/events-shared.jsonl
	$(PY) bench/quality.py --data $(SHARED)

# Rebuild the sample from the shared articles (the committed sample is the output of exactly this).
sample:
	$(PYTHON) scripts/make_sample.py $(SHARED)/news_articles.jsonl $(SAMPLE)

# The README's sample outputs, library example and command reference against the current code.
readme-check: install
	$(PY) scripts/readme_check.py

# Rewrite those parts of the README from what the code prints now.
readme: install
	$(PY) scripts/readme_check.py --write

bench: install
	$(PY) bench/quality.py
	$(PY) bench/throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
