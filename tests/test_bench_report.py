"""What the BEIR and ATEB result writers share (lens.eval.report): reading result folders, the machine lines."""

from __future__ import annotations

import json
import logging

import pytest

from lens.eval.report import machine_lines, result_folders


def _check(obj) -> None:
    if obj.get("ok") is not True:
        raise ValueError("not ok")


def test_result_folders_skip_bad_ones_with_a_warning(tmp_path, caplog):
    for name, text in (("d", '{"ok": true, "n": 2}'), ("a", '{"ok": false}'), ("b", '{"ok": true}'),
                       ("c", '{"ok": tr')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(text)
    (tmp_path / "e").mkdir()  # a folder without results.json is not a result folder
    with caplog.at_level(logging.WARNING, logger="lens.eval.report"):
        found = result_folders(tmp_path, _check, "test results")
    assert found == [("b", {"ok": True}), ("d", {"ok": True, "n": 2})]  # in name order
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and warnings[0].startswith(f"skipping {tmp_path / 'a' / 'results.json'}: not ok")
    assert warnings[1].startswith(f"skipping {tmp_path / 'c' / 'results.json'}")
    assert result_folders(tmp_path / "nowhere") == []


def test_machine_lines_with_and_without_threads():
    info = {"machine": {"cpus": 4, "torch": "2.5", "platform": "Linux-x86_64"}, "started": "s", "finished": "f"}
    assert machine_lines(info) == ["", "Machine: 4 CPUs, torch 2.5, Linux-x86_64. Run s → f."]
    busy = {**info, "contention": "load average 3.1"}
    assert machine_lines(busy, "2 threads") == ["", "Machine: 4 CPUs, torch 2.5 (2 threads), Linux-x86_64. Run s → f.",
                                                "", "**Contention:** load average 3.1"]
    assert machine_lines({}) == ["", "Machine: ? CPUs, torch ?, . Run ? → ?."]


def test_machine_lines_name_the_cpu_and_its_int8_instruction_sets():
    """Quantized encodings differ between hosts, so a run's machine line names the CPU and what int8 kernels use."""
    info = {"machine": {"cpus": 2, "cpu": "AMD EPYC", "int8_features": ["avx2"], "quantized_engine": "x86",
                        "torch": "2.13", "platform": "Linux"}, "started": "s", "finished": "f"}
    assert machine_lines(info) == ["", "Machine: 2 CPUs (AMD EPYC; int8 instruction sets: avx2, int8 engine x86), "
                                   "torch 2.13, Linux. Run s → f."]
    info["machine"].update(int8_features=[], quantized_engine=None)
    assert machine_lines(info)[1].startswith("Machine: 2 CPUs (AMD EPYC; int8 instruction sets: none), torch")


def test_host_reads_the_cpu_once_and_picks_the_int8_features():
    from lens.host import cpu_info, cpu_name, int8_features

    model, flags = cpu_info()
    assert model and cpu_name() == model and flags == " ".join(sorted(flags.split()))
    assert int8_features("sse4_2 avx512_vnni avx2 fma amx_int8") == ["avx2", "avx512_vnni", "amx_int8"]
    assert int8_features("") == [] and set(int8_features()) <= set(flags.split())


def _results(tmp_path, folder, systems, model="default"):
    from lens.atomic import write_json

    s = {"ndcg@10": 0.5, "recall@100": 0.9, "mrr@10": 0.6, "docs_per_s": 10.0, "query_ms_p50": 1.0,
         "query_ms_p95": 2.0}
    write_json(tmp_path / folder / "results.json", {"dataset": folder, "split": "test", "command": "lens bench beir",
                                                     "model": model, "systems": {n: s for n in systems}})


def test_a_readme_the_runner_did_not_write_is_never_replaced(tmp_path):
    """write_readme replaces its own README (it carries GENERATED_MARKER), never a user's; a folder of other
    systems only names no LENS model."""
    import pytest

    from lens.eval.report import GENERATED_MARKER, check_readme_target, write_readme

    _results(tmp_path, "adi", ["bm25", "minilm"])
    readme = write_readme(tmp_path)
    assert GENERATED_MARKER in readme.read_text() and "LENS model(s)" not in readme.read_text()
    _results(tmp_path, "cran", ["bm25", "lens-lexicon"], model="my-model")
    assert "LENS model(s): `my-model`." in write_readme(tmp_path).read_text()  # its own: replaced
    readme.write_text("# My project\n")
    with pytest.raises(FileExistsError, match="not written by the benchmark runner.*choose another --output-dir"):
        write_readme(tmp_path)
    assert readme.read_text() == "# My project\n"
    with pytest.raises(FileExistsError, match="choose another --output$"):
        check_readme_target(tmp_path, "--output")


def test_lens_bench_beir_refuses_a_users_readme_before_any_work(tmp_path, capsys):
    from lens.cli import main

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "README.md").write_text("mine\n")
    assert main(["bench", "beir", str(tmp_path / "missing-set"), "--systems", "bm25", "--output-dir",
                 str(tmp_path / "out")]) == 2  # a wrong set name is named first
    capsys.readouterr()
    data = tmp_path / "set"
    (data / "qrels").mkdir(parents=True)
    assert main(["bench", "beir", str(data), "--systems", "bm25", "--output-dir", str(tmp_path / "out")]) == 2
    assert "README.md exists and was not written by the benchmark runner" in capsys.readouterr().err
    assert (tmp_path / "out" / "README.md").read_text() == "mine\n"


def test_a_run_folder_of_the_users_files_is_refused_before_its_work(tmp_path, capsys):
    """lens bench beir replaces an earlier run's files in a set's folder only with --overwrite, and never a user's;
    the check comes before the set is evaluated, and the folder is left as it was."""
    import pytest
    from bench_helpers import write_beir

    from lens.cli import main
    from lens.eval.report import check_run_target

    data = write_beir(tmp_path / "tiny")
    out = tmp_path / "out"
    argv = ["bench", "beir", str(data), "--systems", "bm25", "--output-dir", str(out), "--no-plot"]
    assert main(argv) == 0
    run = out / "tiny"
    first = json.loads((run / "results.json").read_text())
    saved = {f.name: f.read_bytes() for f in run.iterdir()}
    assert main(argv) == 2  # an earlier run: refused without --overwrite, nothing touched
    assert "holds an earlier run's results" in capsys.readouterr().err
    assert {f.name: f.read_bytes() for f in run.iterdir()} == saved
    argv.append("--overwrite")
    assert main(argv) == 0 and json.loads((run / "results.json").read_text())["systems"].keys() == first["systems"].keys()

    (run / "results.json").write_text('{"my": "notes"}')
    assert main(argv) == 2
    assert "holds files the benchmark runner did not write (its results.json is not a benchmark run's)" in \
        capsys.readouterr().err
    assert (run / "results.json").read_text() == '{"my": "notes"}'

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.md").write_text("# my results\n")
    with pytest.raises(FileExistsError, match="holds results.md but no results.json.*choose another --output$"):
        check_run_target(mine, "--output")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(FileExistsError, match="is a file where the run's folder goes"):
        check_run_target(tmp_path / "afile")
    assert check_run_target(tmp_path / "new") == tmp_path / "new"  # nothing there: fine


def test_each_kind_of_run_has_its_own_folder_and_every_check_comes_first(tmp_path, capsys):
    """A split other than test gets its own folder; two sets that would share one, a set without the split, and a
    results root inside the data are refused before any set runs; --overwrite leaves none of the earlier run's
    files (its TREC runs, its plot) beside the new one's."""
    from bench_helpers import write_beir

    from lens.cli import main

    data = write_beir(tmp_path / "data" / "beir" / "tiny")
    write_beir(data, split="train")
    out = tmp_path / "out"
    base = ["bench", "beir", str(data), "--systems", "bm25", "--output-dir", str(out), "--no-plot"]
    assert main(base) == 0 and main(base + ["--split", "train"]) == 0
    assert json.loads((out / "tiny" / "results.json").read_text())["split"] == "test"
    assert json.loads((out / "tiny-train" / "results.json").read_text())["split"] == "train"

    other = write_beir(tmp_path / "elsewhere" / "tiny")
    no_dev = ["bench", "beir", str(other), str(data), "--systems", "bm25", "--output-dir", str(tmp_path / "o2")]
    assert main(no_dev) == 2
    assert "would both write their results to" in capsys.readouterr().err
    assert main(["bench", "beir", str(other), "--split", "dev", "--systems", "bm25", "--output-dir",
                 str(tmp_path / "o3")]) == 2
    assert "no qrels for split 'dev'" in capsys.readouterr().err
    for root in (data.parent, data):  # the run folder would be the set itself, or lie inside it
        assert main(["bench", "beir", str(data), "--systems", "bm25", "--output-dir", str(root)]) == 2
        assert "into the dataset" in capsys.readouterr().err
    assert main(["bench", "beir", "tiny", "--data-dir", str(tmp_path / "data"), "--systems", "bm25",
                 "--output-dir", str(tmp_path / "data" / "results")]) == 2
    assert "lies in the data dir" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()
    assert sorted(p.name for p in data.iterdir()) == ["corpus.jsonl.gz", "qrels", "queries.jsonl.gz"]

    run = out / "tiny"
    assert main(["bench", "beir", str(data), "--systems", "bm25", "--output-dir", str(out), "--save-runs",
                 "--overwrite"]) == 0
    assert (run / "runs" / "bm25.trec").is_file() and (run / "ndcg.png").is_file()
    assert main(base + ["--overwrite"]) == 0  # no plot, no runs this time: the earlier ones are gone
    assert not (run / "runs").exists() and not (run / "ndcg.png").exists()
    assert not (run / ".runs.partial").exists()


def test_a_benchmark_result_never_lands_in_a_run_folder(tmp_path, capsys):
    """lens bench significance --output inside a lens bench beir run's folder would replace that run's results."""
    from bench_helpers import write_beir

    from lens.cli import main

    data = write_beir(tmp_path / "tiny")
    out = tmp_path / "out"
    assert main(["bench", "beir", str(data), "--systems", "bm25", "--output-dir", str(out), "--no-plot"]) == 0
    saved = (out / "tiny" / "results.json").read_bytes()
    assert main(["bench", "significance", "--run", str(out), "--pairs", "bm25:bm25", "--output",
                 str(out / "tiny" / "results")]) == 2
    assert "is a benchmark run's folder" in capsys.readouterr().err
    assert (out / "tiny" / "results.json").read_bytes() == saved


def test_bench_runners_keep_to_their_own_results_root(tmp_path, capsys):
    """A BEIR root holding an ATEB run (or the reverse) is refused: each would rewrite the README without the
    other's table."""
    from lens.eval.report import check_readme_target

    (tmp_path / "beir" / "adi").mkdir(parents=True)
    (tmp_path / "beir" / "adi" / "results.json").write_text('{"command": "lens bench beir adi", "systems": {}}')
    (tmp_path / "ateb" / "piqa").mkdir(parents=True)
    (tmp_path / "ateb" / "piqa" / "results.json").write_text('{"command": "lens bench ateb", "formulations": {}}')
    assert check_readme_target(tmp_path / "beir") == tmp_path / "beir" / "README.md"
    assert check_readme_target(tmp_path / "ateb", kind="ateb") == tmp_path / "ateb" / "README.md"
    with pytest.raises(FileExistsError, match="holds runs of lens bench beir .adi."):
        check_readme_target(tmp_path / "beir", "--output", kind="ateb")
    with pytest.raises(FileExistsError, match="holds runs of lens bench ateb .piqa."):
        check_readme_target(tmp_path / "ateb")


def test_a_run_names_the_code_and_warns_of_what_its_qrels_cannot_reward(tmp_path, caplog):
    import logging
    from importlib.metadata import version

    from bench_helpers import DOCS, write_beir

    from lens.eval.beir import load_dataset, machine_info

    info = machine_info()
    assert info["lens"] == version("lexlens") and (info["lens_commit"] is None or len(info["lens_commit"].split("+")[0]) == 40)
    qrels = [("q1", DOCS[0]["_id"], 1), ("q1", "gone", 1), ("q2", DOCS[1]["_id"], 0)]
    data = write_beir(tmp_path / "set", qrels=qrels)
    with caplog.at_level(logging.WARNING, logger="lens"):
        load_dataset(data)
    assert "names 1 relevant documents the corpus lacks (e.g. gone)" in caplog.text
    assert "1 of 2 queries have no relevant document" in caplog.text


def test_lens_options_without_a_lens_system_are_warned_of(tmp_path, caplog):
    from bench_helpers import write_beir

    from lens.cli import main

    data = write_beir(tmp_path / "tiny")
    with caplog.at_level(logging.WARNING, logger="lens"):
        assert main(["bench", "beir", str(data), "--systems", "bm25", "--output-dir", str(tmp_path / "o"), "--no-plot",
                     "--instruction", "Find it", "--weights", "0.3,0.7"]) == 0
    assert "--instruction, --weights set the LENS systems, and --systems bm25 runs none" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lens"):
        assert main(["bench", "beir", str(data), "--systems", "bm25", "--output-dir", str(tmp_path / "p"),
                     "--no-plot"]) == 0
    assert "runs none" not in caplog.text
