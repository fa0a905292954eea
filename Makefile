# One command installs everything and runs all tests:  make test
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export STREAM_DEDUP_CACHE ?= $(HOME)/.cache/stream-dedup

.PHONY: install lint test test-unit helm kafka-start kafka-stop bench demo clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,plot]'
	touch $@

install: $(VENV)/.installed

lint: install
	$(VENV)/bin/ruff check stream_dedup tests bench scripts

helm:
	bash scripts/helm.sh

# The Kafka broker is started (and stopped) by the test session itself, see tests/conftest.py.
test: install lint helm
	HELM=$(STREAM_DEDUP_CACHE)/bin/helm $(PY) -m pytest -ra

test-unit: install
	$(PY) -m pytest -ra -m "not kafka"

kafka-start:
	bash scripts/kafka.sh start

kafka-stop:
	bash scripts/kafka.sh stop

SHARED ?= ../shared/data
demo: install
	mkdir -p out
	$(VENV)/bin/stream-dedup dedup $(SHARED)/news_stream.jsonl --out out/events.jsonl --state out/state
	$(PY) bench/quality.py --data $(SHARED)

bench: install
	$(PY) bench/quality.py
	$(PY) bench/throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
