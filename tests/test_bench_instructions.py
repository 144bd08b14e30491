"""lens.instructions: the paper's Table 8 instructions, aliases, the generic fallback and the override."""

from __future__ import annotations

import pytest

from lens.instructions import GENERIC_INSTRUCTION, INSTRUCTIONS, get_instruction, lookup


def test_paper_instructions():
    assert get_instruction("scifact") == "Given a scientific claim, retrieve documents that support or refute the claim"
    assert get_instruction("arguana") == "Given a claim, find documents that refute the claim"
    assert get_instruction("msmarco") == "Given a web search query, retrieve relevant passages that answer the query"
    assert lookup("scifact").source.startswith("paper")
    paper = [k for k, (_, src) in INSTRUCTIONS.items() if src.startswith("paper")]
    assert len(paper) == 15  # Table 8: the 15 BEIR tasks


@pytest.mark.parametrize("name, key", [
    ("SciFact", "scifact"), ("FiQA2018", "fiqa2018"), ("fiqa", "fiqa2018"), ("climate-fever", "climatefever"),
    ("ClimateFEVER", "climatefever"), ("webis-touche2020", "touche2020"), ("trec-covid", "treccovid"),
    ("TRECCOVID", "treccovid"), ("dbpedia-entity", "dbpedia"), ("quora", "quoraretrieval"),
    ("cqadupstack/android", "cqadupstack"), ("CQADupstackGamingRetrieval", "cqadupstack"), ("nq", "nq"),
])
def test_aliases_and_case(name, key):
    assert get_instruction(name) == INSTRUCTIONS[key][0]


def test_ours_are_marked_as_ours():
    for name in ("cranfield", "medline", "adi"):
        ins = lookup(name)
        assert ins.source.startswith("ours") and ins.text != GENERIC_INSTRUCTION
    assert "aeronautics" in get_instruction("cranfield") and "medical" in get_instruction("medline")


def test_unknown_dataset_falls_back_to_generic():
    ins = lookup("my-private-set")
    assert ins.text == GENERIC_INSTRUCTION and ins.source == "generic fallback"


def test_override_wins_and_must_not_be_blank():
    assert lookup("scifact", "Find it").text == "Find it" and lookup("scifact", "Find it").source == "override"
    assert get_instruction("unknown", "Custom task") == "Custom task"
    with pytest.raises(ValueError, match="empty"):
        lookup("scifact", "   ")
