"""LENS in MTEB: instruction choice per task and side, and a local retrieval task scored as our own pytrec_eval
scores the same run (no download)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import assert_close
from lens.instructions import (
    GENERIC, GENERIC_INSTRUCTION, INSTRUCTIONS, MTEB_INSTRUCTIONS, PAPER, TASK_PROMPT, TASK_TYPE_INSTRUCTIONS,
    mteb_instruction,
)

QUERIES = {"q1": "gene expression in the mouse brain", "q2": "drug dose response in a clinical trial",
           "q3": "cancer risk of patients", "q4": "review of protein analysis methods", "q5": "blood cells"}
DOCS = {"d1": "protein gene expression in mouse brain cells", "d2": "clinical trial of drug dose and response",
        "d3": "the review of cell data", "d4": "cancer risk in human patients", "d5": "blood levels after treatment",
        "d6": "methods of protein analysis: a review", "d7": "high and low dose effects", "d8": "brain disease risk"}
QRELS = {"q1": {"d1": 1}, "q2": {"d2": 2, "d7": 1}, "q3": {"d4": 1, "d8": 1}, "q4": {"d6": 1}, "q5": {"d5": 1}}


def test_the_paper_instruction_comes_first():
    assert mteb_instruction("SciFact") == (INSTRUCTIONS["scifact"][0], PAPER)
    assert mteb_instruction("CQADupstackAndroidRetrieval").text == INSTRUCTIONS["cqadupstack"][0]
    assert mteb_instruction("STS12", "STS") == ("Retrieve semantically similar text", PAPER)
    assert mteb_instruction("SICK-R", "STS").source == PAPER
    assert mteb_instruction("Banking77Classification", "Classification", "their own").text == \
        MTEB_INSTRUCTIONS["banking77classification"]
    assert mteb_instruction("SciFact", "Retrieval", override="Find it") == ("Find it", "override")


def test_then_the_task_prompt_then_one_per_task_type():
    assert mteb_instruction("SomeNewRetrieval", "Retrieval", "Given a recipe, retrieve its reviews") == \
        ("Given a recipe, retrieve its reviews", TASK_PROMPT)
    assert mteb_instruction("SomeNewClustering", "Clustering") == (TASK_TYPE_INSTRUCTIONS["Clustering"], GENERIC)
    assert mteb_instruction("SomeNewClustering", "Clustering", "  ").source == GENERIC
    assert mteb_instruction("SomethingElse", "NoSuchType") == (GENERIC_INSTRUCTION, GENERIC)


@pytest.fixture(scope="module")
def mteb():
    return pytest.importorskip("mteb", minversion="2")


def test_our_table_agrees_with_the_prompts_mteb_ships(mteb):
    """mteb's task metadata carries the same E5-mistral instructions for most of these tasks."""
    names = {t.metadata.name.lower(): t.metadata for t in mteb.get_tasks(tasks=[
        "Banking77Classification", "EmotionClassification", "ArxivClusteringP2P", "TwentyNewsgroupsClustering",
        "SprintDuplicateQuestions", "TwitterURLCorpus", "SciDocsRR", "AskUbuntuDupQuestions", "SciFact",
        "ArguAna", "TRECCOVID", "NFCorpus", "QuoraRetrieval", "STS12"], languages=["eng"])}
    checked = 0
    for key, meta in names.items():
        own = meta.prompt.get("query") if isinstance(meta.prompt, dict) else meta.prompt
        if own:
            assert mteb_instruction(meta.name, meta.type).text == own, meta.name
            checked += 1
    assert checked >= 12


@pytest.fixture(scope="module")
def lens_mteb(mteb, tiny_encoder):
    from lens.integrations.mteb import LensMTEBEncoder

    return LensMTEBEncoder(tiny_encoder, name="lens/tiny")


def batches(texts, size=2):
    from datasets import Dataset
    from torch.utils.data import DataLoader

    return DataLoader(Dataset.from_dict({"text": texts}), batch_size=size)


def test_queries_get_the_instruction_and_documents_none(mteb, lens_mteb, tiny_encoder):
    from mteb.types import PromptType

    texts = list(QUERIES.values())
    scifact = mteb.get_task("SciFact").metadata
    where = dict(task_metadata=scifact, hf_split="test", hf_subset="default")
    assert_close(lens_mteb.encode(batches(texts), prompt_type=PromptType.query, **where),
                 tiny_encoder.encode_queries(texts, instruction=INSTRUCTIONS["scifact"][0]))
    assert_close(lens_mteb.encode(batches(texts), prompt_type=PromptType.document, **where),
                 tiny_encoder.encode_documents(texts))
    sts = mteb.get_task("STS12").metadata  # symmetric: no prompt type, every text gets the instruction
    assert_close(lens_mteb.encode(batches(texts), task_metadata=sts, hf_split="test", hf_subset="default"),
                 tiny_encoder.encode_queries(texts, instruction="Retrieve semantically similar text"))
    assert lens_mteb.encode(batches([]), prompt_type=PromptType.query, **where).shape == (0, 16)


def test_an_instruction_override_per_task(mteb, tiny_encoder):
    from mteb.types import PromptType

    from lens.integrations.mteb import LensMTEBEncoder

    model = LensMTEBEncoder(tiny_encoder, instructions={"SciFact": "Find the evidence"})
    scifact = mteb.get_task("SciFact").metadata
    assert model.instruction(scifact, PromptType.query) == "Find the evidence"
    assert model.instruction(scifact, PromptType.document) is None
    with pytest.raises(ValueError, match="empty"):
        LensMTEBEncoder(tiny_encoder, instructions={"SciFact": " "})


def toy_task():
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
    from mteb.abstasks.task_metadata import TaskMetadata

    class LensToyRetrieval(AbsTaskRetrieval):
        metadata = TaskMetadata(
            name="LensToyRetrieval", description="Five queries over eight short documents, built in memory.",
            reference=None, dataset={"path": "local/lens-toy", "revision": "1"}, type="Retrieval", category="t2t",
            modalities=["text"], eval_splits=["test"], eval_langs=["eng-Latn"], main_score="ndcg_at_10",
            date=None, domains=None, task_subtypes=None, license=None, annotations_creators=None, dialect=None,
            sample_creation=None, bibtex_citation=None,
        )

        def load_data(self, num_proc=None, **kwargs):
            self.dataset = {"default": {"test": RetrievalSplitData(
                queries=Dataset.from_list([{"id": k, "text": v} for k, v in QUERIES.items()]),
                corpus=Dataset.from_list([{"id": k, "text": v, "title": ""} for k, v in DOCS.items()]),
                relevant_docs=QRELS, top_ranked=None)}}
            self.data_loaded = True

    return LensToyRetrieval()


def test_a_local_retrieval_task_scores_as_our_own_evaluation(mteb, lens_mteb, tiny_encoder, tmp_path):
    from lens.metrics import evaluate

    result = mteb.evaluate(lens_mteb, toy_task(), cache=mteb.ResultCache(cache_path=tmp_path), co2_tracker=False,
                           show_progress_bar=False, overwrite_strategy="always")
    scores = result.task_results[0].scores["test"][0]

    # the same run by hand: the task has no instruction of its own, so the generic retrieval one
    q = tiny_encoder.encode_queries(list(QUERIES.values()), instruction=TASK_TYPE_INSTRUCTIONS["Retrieval"])
    d = tiny_encoder.encode_documents(list(DOCS.values()))
    sims = q @ d.T
    run = {qid: {did: float(sims[i, j]) for j, did in enumerate(DOCS)} for i, qid in enumerate(QUERIES)}
    ours = evaluate(QRELS, run).mean
    assert scores["ndcg_at_10"] == pytest.approx(ours["ndcg@10"], abs=1e-5)
    assert scores["recall_at_100"] == pytest.approx(ours["recall@100"], abs=1e-5)
    assert scores["main_score"] == scores["ndcg_at_10"]

    folder = tmp_path / "results" / "lens__tiny" / lens_mteb.mteb_model_meta.revision
    saved = json.loads((folder / "LensToyRetrieval.json").read_text())
    assert saved["scores"]["test"][0]["ndcg_at_10"] == pytest.approx(scores["ndcg_at_10"])
    meta = json.loads((folder / "model_meta.json").read_text())
    assert meta["name"] == "lens/tiny" and meta["embed_dim"] == 16 and meta["similarity_fn_name"] == "cosine"


def test_the_metadata_reloads_the_model(mteb, tiny_lens_dir, tiny_encoder):
    from lens.integrations.mteb import LensMTEBEncoder

    model = LensMTEBEncoder(tiny_lens_dir)
    meta = model.mteb_model_meta
    assert meta.name == f"lens/{tiny_lens_dir.name}" and meta.max_tokens == tiny_encoder.max_seq_length
    assert meta.revision == LensMTEBEncoder(tiny_encoder).mteb_model_meta.revision  # same vectors, same revision
    again = meta.load_model()
    assert isinstance(again, LensMTEBEncoder) and again.mteb_model_meta.revision == meta.revision
    texts = list(DOCS.values())
    assert np.array_equal(again.encoder.encode_documents(texts), tiny_encoder.encode_documents(texts))
