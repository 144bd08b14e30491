"""Task instructions put before each query of a dataset (LENS encodes queries as ``<instruct>{task}\\n<query>``).

The BEIR ones are Table 8 of the LENS paper (Lei et al.), which are E5-mistral's instructions. Cranfield, MEDLINE
and ADI are not in the paper: their instructions are ours, written in the same style (``source`` says which).
``TRAINING_INSTRUCTIONS`` gives the training sets in ``shared/data/train`` instructions in the same style, so a
model is trained with the kind of instruction it is evaluated with.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["GENERIC_INSTRUCTION", "INSTRUCTIONS", "TRAINING_INSTRUCTIONS", "Instruction", "get_instruction", "lookup"]

GENERIC_INSTRUCTION = "Given a query, retrieve relevant documents that answer the query"

PAPER, OURS, GENERIC, OVERRIDE = "paper (Table 8)", "ours (not in the paper)", "generic fallback", "override"

# keyed by the lowercase dataset name (MTEB's names); _ALIASES maps BEIR directory names onto them
INSTRUCTIONS: dict[str, tuple[str, str]] = {
    "arguana": ("Given a claim, find documents that refute the claim", PAPER),
    "climatefever": ("Given a claim about climate change, retrieve documents that support or refute the claim", PAPER),
    "cqadupstack": (
        "Given a question, retrieve detailed question descriptions from Stackexchange that are duplicates to the "
        "given question", PAPER,
    ),
    "dbpedia": ("Given a query, retrieve relevant entity descriptions from DBPedia", PAPER),
    "fever": ("Given a claim, retrieve documents that support or refute the claim", PAPER),
    "fiqa2018": ("Given a financial question, retrieve user replies that best answer the question", PAPER),
    "hotpotqa": ("Given a multi-hop question, retrieve documents that can help answer the question", PAPER),
    "msmarco": ("Given a web search query, retrieve relevant passages that answer the query", PAPER),
    "nfcorpus": ("Given a question, retrieve relevant documents that best answer the question", PAPER),
    "nq": ("Given a question, retrieve Wikipedia passages that answer the question", PAPER),
    "quoraretrieval": ("Given a question, retrieve questions that are semantically equivalent to the given question", PAPER),
    "scidocs": ("Given a scientific paper title, retrieve paper abstracts that are cited by the given paper", PAPER),
    "scifact": ("Given a scientific claim, retrieve documents that support or refute the claim", PAPER),
    "touche2020": ("Given a question, retrieve detailed and persuasive arguments that answer the question", PAPER),
    "treccovid": ("Given a query on COVID-19, retrieve documents that answer the query", PAPER),
    # not BEIR: classic test collections, ours
    "cranfield": ("Given a question about aeronautics, retrieve scientific abstracts that answer the question", OURS),
    "medline": ("Given a medical question, retrieve MEDLINE abstracts that answer the question", OURS),
    "adi": ("Given a query about information science, retrieve relevant document abstracts", OURS),
}

# training sets (by directory name), ours, in the paper's "Given a ..., retrieve ..." style
TRAINING_INSTRUCTIONS: dict[str, str] = {
    "squad": "Given a question, retrieve Wikipedia passages that answer the question",
    "nq-qed": "Given a question, retrieve Wikipedia passages that answer the question",
    "wikiqa": "Given a question, retrieve Wikipedia sentences that answer the question",
    "pubmedqa-labeled": "Given a biomedical question, retrieve PubMed abstracts that help answer the question",
    "snli-cad": "Given a premise, retrieve a hypothesis that is entailed by the premise",
    "msrp-paraphrase": "Retrieve semantically similar text",
    "tweeteval": "Given a tweet, retrieve the description of its sentiment, emotion, stance, irony, offensiveness or emoji",
    "clinc150": "Given a user utterance to a virtual assistant, retrieve the description of its intent",
    "banking77": "Given an online banking customer query, retrieve the description of its intent",
    "trec-qc": "Given a question, retrieve the description of the type of answer it asks for",
}

_ALIASES = {
    "climate-fever": "climatefever",
    "dbpedia-entity": "dbpedia",
    "fiqa": "fiqa2018",
    "quora": "quoraretrieval",
    "webis-touche2020": "touche2020",
    "trec-covid": "treccovid",
    "med": "medline",
    "cran": "cranfield",
}


class Instruction(NamedTuple):
    text: str
    source: str  # PAPER, OURS, GENERIC or OVERRIDE


def _key(dataset: str) -> str:
    name = dataset.strip().lower()
    name = _ALIASES.get(name, name)
    if name.startswith("cqadupstack"):  # cqadupstack/android, CQADupstackAndroidRetrieval, ...
        return "cqadupstack"
    if name in INSTRUCTIONS:
        return name
    squashed = re.sub(r"[^a-z0-9]", "", name)
    return _ALIASES.get(squashed, squashed)


def lookup(dataset: str, override: str | None = None) -> Instruction:
    """The instruction for ``dataset`` and where it comes from; ``override`` (if given) wins."""
    if override is not None:
        if not override.strip():
            raise ValueError("the instruction override is empty; give a task description or leave it out")
        return Instruction(override, OVERRIDE)
    hit = INSTRUCTIONS.get(_key(dataset))
    if hit is None and dataset.strip().lower() in TRAINING_INSTRUCTIONS:
        hit = (TRAINING_INSTRUCTIONS[dataset.strip().lower()], OURS)
    return Instruction(*hit) if hit else Instruction(GENERIC_INSTRUCTION, GENERIC)


def get_instruction(dataset: str, override: str | None = None) -> str:
    """The instruction text for ``dataset`` (generic fallback for unknown datasets)."""
    return lookup(dataset, override).text
