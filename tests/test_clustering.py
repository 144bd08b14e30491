"""Vocabulary clustering: determinism, no empty cluster, centroids as means, the cluster-vocab directory."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from lens.cli import main
from lens.clustering import centroids_from_assignment, cluster_rows, clusters_tsv, fill_empty_clusters


def blobs(n=300, d=8, centres=6, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centres, d)) * 5
    return (c[rng.integers(0, centres, n)] + rng.normal(size=(n, d))).astype(np.float32)


@pytest.mark.parametrize("backend", ["faiss", "sklearn"])
def test_same_seed_same_clusters(backend):
    x = blobs()
    a = cluster_rows(x, 10, iterations=5, seed=3, backend=backend)
    b = cluster_rows(x, 10, iterations=5, seed=3, backend=backend)
    assert np.array_equal(a.assignment, b.assignment) and np.array_equal(a.centroids, b.centroids)
    assert a.sizes.min() >= 1 and a.sizes.sum() == len(x)
    assert a.objective[-1] <= a.objective[0]


def test_centroids_are_cluster_means():
    x = blobs()
    r = cluster_rows(x, 7, iterations=4)
    for c in range(7):
        np.testing.assert_allclose(r.centroids[c], x[r.assignment == c].mean(0), rtol=1e-5, atol=1e-5)


def test_duplicate_rows_leave_no_empty_cluster():
    # 40 rows but only 5 distinct values: KMeans with k=12 must leave clusters empty; they get filled
    x = np.repeat(np.eye(5, 4, dtype=np.float32) * 3, 8, axis=0)
    r = cluster_rows(x, 12, iterations=3)
    assert (r.sizes >= 1).all()


def test_fill_empty_clusters_moves_the_farthest_member():
    x = np.array([[0.0], [1.0], [10.0], [5.0]], dtype=np.float32)
    labels = fill_empty_clusters(x, np.array([0, 0, 0, 1]), k=3)
    assert labels.tolist() == [0, 0, 2, 1]  # 10.0 is farthest from cluster 0's mean (3.67)


def test_excluded_rows_get_minus_one():
    x = blobs(n=50)
    r = cluster_rows(x, 4, iterations=2, exclude=[0, 5, 7])
    assert (r.assignment[[0, 5, 7]] == -1).all() and (np.delete(r.assignment, [0, 5, 7]) >= 0).all()
    np.testing.assert_allclose(centroids_from_assignment(x, r.assignment, 4), r.centroids, atol=1e-6)


@pytest.mark.parametrize("kwargs,match", [
    ({"k": 0}, "between 1 and"), ({"k": 1000}, "between 1 and"),
    ({"k": 3, "backend": "scipy"}, "valid: \\['faiss', 'sklearn'\\]"), ({"k": 3, "iterations": 0}, "iterations"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cluster_rows(blobs(n=40), **kwargs)


def test_nan_matrix_is_refused():
    x = blobs(n=40)
    x[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cluster_rows(x, 3)


def test_cluster_vocab_directory_is_byte_identical_for_the_same_seed(tiny_backbone_dir, tmp_path):
    runs = []
    for name, seed in [("a", 1), ("b", 1), ("c", 2)]:
        out = tmp_path / name
        assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--clusters", "12", "--seed", str(seed),
                     "--iterations", "4", "--exclude-special", "--out", str(out)]) == 0
        runs.append({f: (out / f).read_bytes() for f in ("config.json", "clusters.safetensors", "clusters.tsv")})
    assert runs[0] == runs[1]
    assert runs[0]["clusters.safetensors"] != runs[2]["clusters.safetensors"]

    config = json.loads(runs[0]["config.json"])
    assert config["format_version"] == 1 and config["clustering"]["num_clusters"] == 12
    assert config["clustering"]["seed"] == 1 and config["clustering"]["exclude_special"] is True
    assert len(config["clustering"]["lm_head_sha256"]) == 64
    tensors = load_file(tmp_path / "a" / "clusters.safetensors")
    assert tensors["centroids"].shape == (12, 32)
    assignment = tensors["assignment"]
    assert (assignment[:4] == -1).all()  # the four special tokens were excluded
    assert (np.bincount(assignment[assignment >= 0], minlength=12) >= 1).all()


def test_clusters_tsv_lists_every_cluster_readably(tokenizer):
    assignment = np.array([0, 1, 1, -1, 0] + [2] * (len(tokenizer) - 5))
    lines = clusters_tsv(assignment, 3, tokenizer).splitlines()
    assert lines[0] == "cluster\tsize\ttokens"
    assert lines[1] == '0\t2\t"<unk>" "the"'
    assert lines[2].startswith('1\t2\t"<s>" "</s>"')
    assert all(len(line.split("\t")) == 3 for line in lines)


def test_cluster_vocab_attention_is_saved_and_loaded(tiny_backbone_dir, tmp_path):
    """`--attention causal` is what the saved model runs: a later token changes no earlier position's logits."""
    import torch

    from lens.encoder import LensEncoder

    out = tmp_path / "causal"
    assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--clusters", "12", "--iterations", "2",
                 "--attention", "causal", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["attention"] == "causal"
    enc = LensEncoder.from_pretrained(out, device="cpu")
    assert enc.config.attention == "causal"
    ids = torch.tensor([[5, 6, 7, 8]])
    decoder = enc.model.decoder
    with torch.no_grad():
        a = decoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        ids2 = ids.clone()
        ids2[0, -1] = 9
        b = decoder(input_ids=ids2, attention_mask=torch.ones_like(ids2)).last_hidden_state
    assert torch.allclose(a[0, :3], b[0, :3], atol=1e-6) and not torch.allclose(a[0, 3], b[0, 3])
    assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--attention", "sideways",
                 "--out", str(tmp_path / "x")]) == 2


def test_cluster_vocab_saves_the_text_rule_and_term_floor(tiny_backbone_dir, tmp_path):
    from conftest import assert_close
    from lens.cli import main
    from lens.encoder import LensEncoder

    out = tmp_path / "folded"
    assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--clusters", "12", "--iterations", "2",
                 "--text-normalization", "lowercase", "--term-floor", "0.3", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["text_normalization"], config["term_floor"]) == ("lowercase", 0.3)
    enc = LensEncoder.from_pretrained(out)
    assert_close(enc.encode(["CELL Protein"]), enc.encode(["cell protein"]), atol=0)
    assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--text-normalization", "upper",
                 "--out", str(tmp_path / "x")]) == 2
    assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--term-floor", "1.5",
                 "--out", str(tmp_path / "y")]) == 2


def test_lm_head_rows_past_the_tokenizer_are_left_out(tokenizer, tmp_path):
    """Qwen-style padding rows (an LM head longer than the tokenizer) are in no cluster: no text can produce them,
    and as clusters of their own they would be dimensions no token reaches."""
    from lens.encoder import LensEncoder
    from lens.testing import make_causal_lm

    hf = tmp_path / "padded"
    make_causal_lm("qwen2", len(tokenizer) + 8).save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    for clusters, k in (("8", 8), ("vocab", len(tokenizer))):
        out = tmp_path / f"k-{clusters}"
        assert main(["cluster-vocab", "--model", str(hf), "--clusters", clusters, "--out", str(out)]) == 0
        assignment = load_file(out / "clusters.safetensors")["assignment"]
        assert len(assignment) == len(tokenizer) + 8 and (assignment[len(tokenizer):] == -1).all()
        assert (assignment[: len(tokenizer)] >= 0).all() and len(np.unique(assignment[: len(tokenizer)])) == k
        config = json.loads((out / "config.json").read_text())["clustering"]
        assert config["num_clusters"] == k and config["num_excluded"] == 8
        assert LensEncoder.from_pretrained(out).encode(["cell gene"]).shape == (1, k)


def test_max_length_is_cut_to_the_backbones_positions(tokenizer, tiny_lens_dir, tmp_path):
    """A backbone built for fewer positions than the default 512 gets texts cut at its own length, not past it."""
    from lens.encoder import LensEncoder
    from lens.testing import make_causal_lm

    short = tmp_path / "short"
    model = make_causal_lm("llama", len(tokenizer))
    model.config.max_position_embeddings = 64
    model.save_pretrained(short)
    tokenizer.save_pretrained(short)
    out = tmp_path / "k8"
    assert main(["cluster-vocab", "--model", str(short), "--clusters", "8", "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["max_length"] == 64
    assert LensEncoder.from_pretrained(out).max_seq_length == 64
    assert json.loads((tiny_lens_dir / "config.json").read_text())["max_length"] == 512  # 512 positions: as before
