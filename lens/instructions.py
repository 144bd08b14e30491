"""Task instructions put before each query of a dataset (LENS encodes queries as ``<instruct>{task}\\n<query>``).

The BEIR ones are Table 8 of the LENS paper (Lei et al.), which are E5-mistral's instructions. Cranfield, MEDLINE
and ADI are not in the paper: their instructions are ours, written in the same style (``source`` says which).
``TRAINING_INSTRUCTIONS`` gives the training sets in ``shared/data/train`` instructions in the same style, so a
model is trained with the kind of instruction it is evaluated with. ``ATEB_INSTRUCTIONS`` gives the advanced tasks
posed as retrieval (``lens.ateb``, the ATEB / RAR-b development sets) theirs, also ours in the same style: one per
task, keyed by the task's name, and one per other formulation of it, keyed ``task/kind``.
``MTEB_INSTRUCTIONS`` gives the paper's other MTEB tasks (classification, clustering, pair classification,
reranking, STS, summarization) theirs, also Table 8; ``mteb_instruction`` picks a task's instruction for
``lens.integrations.mteb``, with ``TASK_TYPE_INSTRUCTIONS`` (ours) for a task found nowhere.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["ATEB_INSTRUCTIONS", "GENERIC_INSTRUCTION", "INSTRUCTIONS", "MTEB_INSTRUCTIONS", "TASK_TYPE_INSTRUCTIONS",
           "TRAINING_INSTRUCTIONS", "Instruction", "ateb_instruction", "get_instruction", "lookup", "mteb_instruction"]

GENERIC_INSTRUCTION = "Given a query, retrieve relevant documents that answer the query"

PAPER, OURS, GENERIC, OVERRIDE = "paper (Table 8)", "ours (not in the paper)", "generic fallback", "override"
TASK_PROMPT = "the task's own prompt (MTEB metadata)"

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

# advanced tasks as retrieval (lens.ateb), ours: "task" is the task's main formulation, "task/kind" another one
# (a kind without its own entry, e.g. piqa's answer pool, asks the same question as the task's main one)
ATEB_INSTRUCTIONS: dict[str, str] = {
    "piqa": "Given a goal about the physical world, retrieve the solution that achieves it",
    "winogrande": "Given a sentence with a blank marked _, retrieve the option that correctly fills the blank",
    "esnli": "Given a premise and a hypothesis, retrieve the description of whether the premise entails the "
             "hypothesis, contradicts it, or neither",
    "esnli/pair-classification": "Given a premise, retrieve a hypothesis that is entailed by the premise",
    "dialfact": "Given evidence and a dialogue response, retrieve the description of whether the evidence supports "
                "the response, refutes it, or is not enough to tell",
    "dialfact/pair-classification": "Given a piece of evidence, retrieve a dialogue response that the evidence "
                                    "supports",
    "hh_rlhf_harmless": "Given a conversation between a human and an AI assistant, retrieve the assistant reply "
                        "that is harmless",
}

# the paper's other MTEB tasks (Table 8: E5-mistral's instructions), keyed by MTEB's task name in lowercase; the
# BEIR retrieval tasks are in INSTRUCTIONS. A symmetric task (STS, clustering, ...) puts it before every text.
_STS = "Retrieve semantically similar text"
MTEB_INSTRUCTIONS: dict[str, str] = {
    # classification
    "amazoncounterfactualclassification": "Classify a given Amazon customer review text as either counterfactual or "
                                          "not-counterfactual",
    "amazonpolarityclassification": "Classify Amazon reviews into positive or negative sentiment",
    "amazonreviewsclassification": "Classify the given Amazon review into its appropriate rating category",
    "banking77classification": "Given a online banking query, find the corresponding intents",
    "emotionclassification": "Classify the emotion expressed in the given Twitter message into one of the six "
                             "emotions: anger, fear, joy, love, sadness, and surprise",
    "imdbclassification": "Classify the sentiment expressed in the given movie review text from the IMDB dataset",
    "massiveintentclassification": "Given a user utterance as query, find the user intents",
    "massivescenarioclassification": "Given a user utterance as query, find the user scenarios",
    "mtopdomainclassification": "Classify the intent domain of the given utterance in task-oriented conversation",
    "mtopintentclassification": "Classify the intent of the given utterance in task-oriented conversation",
    "toxicconversationsclassification": "Classify the given comments as either toxic or not toxic",
    "tweetsentimentextractionclassification": "Classify the sentiment of a given tweet as either positive, negative, "
                                              "or neutral",
    # clustering
    "arxivclusteringp2p": "Identify the main and secondary category of Arxiv papers based on the titles and abstracts",
    "arxivclusterings2s": "Identify the main and secondary category of Arxiv papers based on the titles",
    "biorxivclusteringp2p": "Identify the main category of Biorxiv papers based on the titles and abstracts",
    "biorxivclusterings2s": "Identify the main category of Biorxiv papers based on the titles",
    "medrxivclusteringp2p": "Identify the main category of Medrxiv papers based on the titles and abstracts",
    "medrxivclusterings2s": "Identify the main category of Medrxiv papers based on the titles",
    "redditclustering": "Identify the topic or theme of Reddit posts based on the titles",
    "redditclusteringp2p": "Identify the topic or theme of Reddit posts based on the titles and posts",
    "stackexchangeclustering": "Identify the topic or theme of StackExchange posts based on the titles",
    "stackexchangeclusteringp2p": "Identify the topic or theme of StackExchange posts based on the given paragraphs",
    "twentynewsgroupsclustering": "Identify the topic or theme of the given news articles",
    # pair classification
    "sprintduplicatequestions": "Retrieve duplicate questions from Sprint forum",
    "twittersemeval2015": "Retrieve tweets that are semantically similar to the given tweet",
    "twitterurlcorpus": "Retrieve tweets that are semantically similar to the given tweet",
    # reranking
    "askubuntudupquestions": "Retrieve duplicate questions from AskUbuntu forum",
    "mindsmallreranking": "Retrieve relevant news articles based on user browsing history",
    "scidocsrr": "Given a title of a scientific paper, retrieve the titles of other relevant papers",
    "stackoverflowdupquestions": "Retrieve duplicate questions from StackOverflow forum",
    # STS
    **{name: _STS for name in ("sts12", "sts13", "sts14", "sts15", "sts16", "sts17", "sts22", "stsbenchmark",
                               "biosses", "sick-r")},
    # summarization
    "summeval": "Given a news summary, retrieve other semantically similar summaries",
}

# ours: per MTEB task type, for a task with no instruction above and none of its own
TASK_TYPE_INSTRUCTIONS: dict[str, str] = {
    "Retrieval": GENERIC_INSTRUCTION,
    "Reranking": GENERIC_INSTRUCTION,
    "InstructionRetrieval": GENERIC_INSTRUCTION,
    "STS": _STS,
    "PairClassification": "Retrieve text that is semantically similar to the given text",
    "Classification": "Classify the given text into its category",
    "MultilabelClassification": "Classify the given text into its categories",
    "Clustering": "Identify the topic or theme of the given text",
    "Summarization": "Given a summary, retrieve other semantically similar summaries",
    "BitextMining": "Retrieve parallel sentences",
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
    if hit is None and dataset.strip().lower() in ATEB_INSTRUCTIONS:
        hit = (ATEB_INSTRUCTIONS[dataset.strip().lower()], OURS)
    if hit is None and dataset.strip().lower() in TRAINING_INSTRUCTIONS:
        hit = (TRAINING_INSTRUCTIONS[dataset.strip().lower()], OURS)
    return Instruction(*hit) if hit else Instruction(GENERIC_INSTRUCTION, GENERIC)


def get_instruction(dataset: str, override: str | None = None) -> str:
    """The instruction text for ``dataset`` (generic fallback for unknown datasets)."""
    return lookup(dataset, override).text


def ateb_instruction(task: str, kind: str | None = None) -> str:
    """The instruction of an advanced task's formulation: ``task/kind`` when it has its own, else the task's.

    Raises ValueError naming the known tasks for an unknown one."""
    name = task.strip().lower()
    if kind is not None and f"{name}/{kind}" in ATEB_INSTRUCTIONS:
        return ATEB_INSTRUCTIONS[f"{name}/{kind}"]
    if name not in ATEB_INSTRUCTIONS:
        known = sorted(k for k in ATEB_INSTRUCTIONS if "/" not in k)
        raise ValueError(f"no instruction for the task {task!r}; known tasks: {', '.join(known)}")
    return ATEB_INSTRUCTIONS[name]


def mteb_instruction(task: str, task_type: str | None = None, task_prompt: str | None = None,
                     override: str | None = None) -> Instruction:
    """The instruction of the MTEB task ``task`` (of type ``task_type``, e.g. "STS") and where it comes from.

    In order: ``override``; the paper's (``MTEB_INSTRUCTIONS``, then ``lookup``'s BEIR names); ``task_prompt``,
    the task's own (mteb's metadata); ``TASK_TYPE_INSTRUCTIONS[task_type]``; the generic retrieval one.
    """
    if override is not None:
        return lookup(task, override)
    hit = MTEB_INSTRUCTIONS.get(task.strip().lower())
    if hit is not None:
        return Instruction(hit, PAPER)
    found = lookup(task)
    if found.source != GENERIC:
        return found
    if task_prompt is not None and task_prompt.strip():
        return Instruction(task_prompt, TASK_PROMPT)
    if task_type in TASK_TYPE_INSTRUCTIONS:
        return Instruction(TASK_TYPE_INSTRUCTIONS[task_type], GENERIC)
    return Instruction(GENERIC_INSTRUCTION, GENERIC)
