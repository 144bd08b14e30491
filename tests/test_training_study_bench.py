"""The pure parts of benchmarks/training_study.py: where a variant's training files come from and the table."""

from __future__ import annotations

import pytest
from bench_helpers import load_script


@pytest.fixture(scope="module")
def study():
    return load_script("training_study")


def test_mixture_names_map_to_files_and_missing_ones_name_the_make_targets(study, tmp_path):
    settings = {**study.BASE, **study.VARIANTS["retrieval-only-bce-teacher"][1]}
    for name in settings["mixture"]:
        (tmp_path / f"{name}.jsonl.gz").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{name}.jsonl.gz").write_bytes(b"")
    config = study.train_config(settings, tmp_path / "model", tmp_path, tmp_path / "val.jsonl.gz", 5, 0, 10, 1)
    assert config.stages[0].data == [str(tmp_path / "teacher" / f"{s}.jsonl.gz") for s in study.RETRIEVAL]
    assert config.stages[0].loss == "infonce+0.2*flops+0.5*bce-teacher"
    plain = {**study.BASE, "mixture": ["squad"]}  # a bare name lives under mixture/
    with pytest.raises(SystemExit, match=r"mixture/squad\.jsonl\.gz.*make train-data-mixture"):
        study.train_config(plain, tmp_path / "model", tmp_path, tmp_path / "val.jsonl.gz", 5, 0, 10, 1)


def test_markdown_rows_for_variants_and_saved_models(study, tmp_path):
    row = {"scifact_ndcg": 0.61234, "stsb_dev": 66.96, "doc_nonzero": 700.2, "doc_dims": 4000}
    results = {"_meta": {"steps": 300, "per_task": 1000, "judge_queries": 100, "bm25_ndcg": 0.69},
               "retrieval-only": {**row, "val_loss": 1.5832, "step_s": 4.1, "threads": 2, "cache_s": 842.0},
               "model:default": {**row, "scifact_ndcg": 0.6612, "scifact_hybrid": 0.70123, "val_loss": None}}
    out = tmp_path / "study.md"
    study.write_markdown(results, out, "python benchmarks/training_study.py")
    lines = out.read_text().splitlines()
    trained = next(line for line in lines if line.startswith("| retrieval-only |"))
    saved = next(line for line in lines if line.startswith("| model:default |"))
    assert "| 0.6123 | - | 67.0 | 1.583 | 700 of 4000 | 4.10 (2) | 842 |" in trained  # judged before the hybrid
    assert "a saved model (default)" in saved and "| 0.6612 | 0.7012 | 67.0 | - | 700 of 4000 | - | - |" in saved


def test_hybrid_variants_train_the_hybrid_loss(study, tmp_path):
    from lens.train.objectives import parse_loss

    for name, terms in (("retrieval-only-k8000-hybrid", {"hybrid", "flops"}),
                        ("retrieval-only-k8000-infonce-hybrid", {"infonce", "hybrid", "flops"})):
        settings = {**study.BASE, **study.VARIANTS[name][1]}
        assert set(parse_loss(settings["loss"])) == terms and settings["clusters"] == 8000


def test_a_forced_rejudge_keeps_the_finished_runs_timings(study):
    previous = {"steps": 300, "threads": 2, "setup_s": 40.0, "train_s": 1476.0, "step_s": 4.92, "cache_s": 0}
    rejudged = {"steps": 300, "threads": 2, "setup_s": 35.0, "train_s": 0.52, "step_s": 0.0017, "cache_s": 0.08}
    assert study.keep_timings(rejudged, previous) == previous
    retrained = {**rejudged, "train_s": 1500.0, "step_s": 5.0}
    assert study.keep_timings(retrained, previous) == retrained  # it ran again: its own times
    assert study.keep_timings(rejudged, None) == rejudged


def test_other_seeds_get_their_own_rows_and_a_spread_line(study, tmp_path):
    assert study.row_name("retrieval-only-k8000", 0) == "retrieval-only-k8000"
    assert study.row_name("retrieval-only-k8000", 2) == "retrieval-only-k8000@seed2"
    assert study.variant_of("retrieval-only-k8000@seed2") == "retrieval-only-k8000"
    row = {"scifact_ndcg": 0.676, "scifact_hybrid": 0.683, "stsb_dev": 71.4, "val_loss": 1.35, "doc_nonzero": 1.0,
           "doc_dims": 8000}
    results = {"_meta": {"steps": 300}, "retrieval-only-k8000": row,
               "retrieval-only-k8000@seed1": {**row, "seed": 1, "scifact_ndcg": 0.690, "stsb_dev": 68.0},
               "retrieval-only-k2000": {**row, "scifact_ndcg": 0.5}}
    spread = study.seed_spread(results)
    assert len(spread) == 3  # a blank line, the heading, and one variant: k2000 has a single seed
    assert "retrieval-only-k8000** over seeds [0, 1]" in spread[2]
    assert "SciFact held-out 0.6760 to 0.6900 (range 0.0140)" in spread[2] and "STS-B dev 68.0 to 71.4" in spread[2]
    assert "hybrid 0.6830 to 0.6830 (range 0.0000)" in spread[2]
    out = tmp_path / "study.md"
    study.write_markdown(results, out, "python benchmarks/training_study.py")
    text = out.read_text()
    assert "| retrieval-only-k8000@seed1 | retrieval-only with 8000 clusters (seed 1) | 0.6900 |" in text
    assert spread[2] in text


def test_the_table_lists_every_invocation_that_added_rows(study, tmp_path):
    row = {"scifact_ndcg": 0.6, "stsb_dev": 70.0, "doc_nonzero": 1.0, "doc_dims": 8000}
    out = tmp_path / "study.md"
    results = {"_meta": {"steps": 300}, "retrieval-only-k8000": row}
    study.write_markdown(results, out, "python benchmarks/training_study.py --seed 1")
    assert "Command:\n\n`python benchmarks/training_study.py --seed 1`\n" in out.read_text()
    results["_meta"]["commands"] = ["python a.py --variants x", "python a.py --seed 1"]
    study.write_markdown(results, out, "python a.py --seed 1")
    text = out.read_text()
    assert "Commands (each added the rows it names" in text
    assert "- `python a.py --variants x`\n- `python a.py --seed 1`\n" in text


def test_the_mntp_variant_warms_a_bidirectional_start_and_refuses_a_causal_one(study, tmp_path):
    settings = {**study.BASE, **study.VARIANTS["retrieval-only-k8000-bidirectional-mntp"][1]}
    assert (settings["attention"], settings["mntp_steps"], settings["clusters"]) == ("bidirectional", 100, 8000)
    assert study.BASE["mntp_steps"] == 0 and all(
        s.get("mntp_steps", 0) == 0 for n, (_, s) in study.VARIANTS.items() if "mntp" not in n)
    (tmp_path / "smollm2-k16").mkdir()
    (tmp_path / "smollm2-k16" / "config.json").write_text("{}")  # the clustering exists: nothing to cluster
    with pytest.raises(SystemExit, match="MNTP warm-up is for bidirectional attention"):
        study.start_model(tmp_path, 16, "causal", mntp_steps=10, data=tmp_path)


def test_the_term_channel_variant_starts_from_a_copy_that_names_the_channel(study, tiny_lens_dir, tmp_path):
    import shutil

    from lens.config import LensConfig

    settings = {**study.BASE, **study.VARIANTS["retrieval-only-k8000-term-channel"][1]}
    assert settings["term_channel"] is True and study.BASE["term_channel"] is False
    shutil.copytree(tiny_lens_dir, tmp_path / "smollm2-k16")  # the clustering exists: nothing to cluster
    start = study.start_model(tmp_path, 16, "bidirectional", term_channel=True)
    assert start.name == "smollm2-k16-terms" and LensConfig.load(start).term_channel
    assert not LensConfig.load(tmp_path / "smollm2-k16").term_channel  # the shared start is left as it was
    both = study.start_model(tmp_path, 16, "bidirectional", logit_position="own", term_channel=True)
    assert both.name == "smollm2-k16-own-terms" and LensConfig.load(both).logit_position == "own"
