"""The explicit term channel (issue 39): each pooled token's own cluster gets a learned weight from the token's own
position, merged by max with the expansion; pure maths against a loop, then the model directory, encoder and
trainer that carry it."""

import json

import numpy as np
import pytest
import torch

from lens.pooling import TERM_BIAS_INIT, merge_terms, term_weights

from conftest import assert_close, lens_dir_copy
from test_train import _config, data_file  # noqa: F401  (the toy training file fixture)


def test_merge_terms_against_a_loop():
    g = torch.Generator().manual_seed(0)
    B, L, K = 3, 7, 5
    lexicon = torch.rand(B, K, generator=g)
    clusters = torch.randint(-1, K, (B, L), generator=g)
    weights = 2 * torch.rand(B, L, generator=g)
    mask = torch.rand(B, L, generator=g) > 0.3
    want = lexicon.clone()
    for b in range(B):
        for t in range(L):
            c = int(clusters[b, t])
            if mask[b, t] and c >= 0:
                want[b, c] = max(float(want[b, c]), float(weights[b, t]))
    assert_close(merge_terms(lexicon, clusters, weights, mask).numpy(), want.numpy(), atol=0)
    # nothing masked in: the expansion as it was
    assert_close(merge_terms(lexicon, clusters, weights, torch.zeros_like(mask)).numpy(), lexicon.numpy(), atol=0)


def test_term_weights_are_saturated_and_differentiable():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(2, 4, 6, generator=g)
    w = torch.randn(6, generator=g, requires_grad=True)
    b = torch.tensor(0.5, requires_grad=True)
    got = term_weights(hidden, w, b)
    want = torch.log1p(torch.relu(torch.einsum("blh,h->bl", hidden, w) + b))
    assert_close(got.detach().numpy(), want.detach().numpy(), atol=1e-6)
    assert (got >= 0).all()
    # the gradient reaches the weights through the winning entries of the max merge
    merged = merge_terms(torch.zeros(2, 3), torch.zeros(2, 4, dtype=torch.long), got, torch.ones(2, 4))
    merged.sum().backward()
    assert w.grad is not None and float(w.grad.abs().sum()) > 0


@pytest.fixture
def term_dir(tiny_lens_dir, tmp_path):
    return lens_dir_copy(tiny_lens_dir, tmp_path / "term", term_channel=True)


def test_untrained_channel_raises_each_own_tokens_cluster_to_its_start(tiny_lens_dir, term_dir):
    """A directory naming the channel without its weights starts every text token at log1p(TERM_BIAS_INIT); the
    special tokens (EOS) are left out; everything else is the plain model's vector."""
    from lens.encoder import LensEncoder
    from lens.inputs import encode_texts

    plain, enc = LensEncoder.from_pretrained(tiny_lens_dir), LensEncoder.from_pretrained(term_dir)
    assert "term_channel" not in json.loads((tiny_lens_dir / "config.json").read_text())
    assert enc.fingerprint()["lens_term_channel"] is True and "lens_term_channel" not in plain.fingerprint()
    assert enc.fingerprint()["lens_clusters"] != plain.fingerprint()["lens_clusters"]
    text = "cell protein gene"
    base = plain.encode(text, normalize=False)
    item = encode_texts(enc.tokenizer, [text], 32)[0]
    want = base.copy()
    start = float(np.log1p(TERM_BIAS_INIT))
    for tok, pooled in zip(item.ids, item.pool):
        c = int(enc.assignment[tok])
        if pooled and c >= 0 and tok not in enc.tokenizer.all_special_ids:
            want[c] = max(want[c], start)
    eos_cluster = int(enc.assignment[enc.tokenizer.eos_token_id])
    assert not np.allclose(want, base)  # the channel raises something here, so the comparison tests it
    assert_close(enc.encode(text, normalize=False), want, atol=1e-5)
    if base[eos_cluster] < start and eos_cluster not in {int(enc.assignment[t]) for t in item.ids[1:-1]}:
        assert enc.encode(text, normalize=False)[eos_cluster] == pytest.approx(base[eos_cluster], abs=1e-6)


def test_query_instruction_gets_no_term_weight(tiny_lens_dir, term_dir):
    """Only the query text's own clusters may move: the instruction's tokens are never pooled, so never raised."""
    from lens.encoder import LensEncoder

    plain, enc = LensEncoder.from_pretrained(tiny_lens_dir), LensEncoder.from_pretrained(term_dir)
    kw = dict(instruction="protein gene brain mouse blood drug", normalize=False)
    a, b = plain.encode_queries("cell", **kw), enc.encode_queries("cell", **kw)
    own = {int(enc.assignment[t]) for t in enc.tokenizer("cell", add_special_tokens=False)["input_ids"]}
    moved = set(np.flatnonzero(~np.isclose(a, b, atol=1e-6)).tolist())
    assert moved and moved <= own
    assert all(b[c] >= float(np.log1p(TERM_BIAS_INIT)) - 1e-6 for c in own)


def test_trained_channel_is_saved_loaded_and_resumed(term_dir, data_file, tmp_path):  # noqa: F811
    from lens.encoder import LensEncoder
    from lens.model_dir import read_model_dir
    from lens.train.trainer import Trainer

    cfg = _config(term_dir, data_file, lora_layers=1, train_head=True)
    t = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    assert any(g["name"] == "term" for g in t.optimizer.param_groups)
    rates = {g["name"]: g["base_lr"] for g in Trainer(_config(term_dir, data_file, lora_layers=1, head_lr=2e-3,
                                                               term_lr=3e-2), tmp_path / "rates",
                                                       show_progress_bar=False).optimizer.param_groups}
    assert (rates["term"], rates["head"]) == (3e-2, 2e-3)  # term_lr is the channel's own; the head keeps its rate
    with pytest.raises(ValueError, match="term_lr must be > 0"):
        _config(term_dir, data_file, term_lr=0.0)
    out = t.train()
    trained = t.model.term_vector()
    assert not np.allclose(trained, np.r_[np.zeros(trained.size - 1), TERM_BIAS_INIT])  # it learnt
    files = read_model_dir(out)
    assert_close(files.term, trained, atol=0)
    texts = ["cancer drug trial", "mouse gene expression levels"]
    with torch.no_grad():
        t.decoder.eval()
        want = t.encode(texts)
    got = LensEncoder.from_pretrained(out).encode_documents(texts)
    assert_close(got, want, atol=1e-4)

    # a checkpoint carries the channel: a resumed trainer starts from the saved weights
    resumed = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    resumed.load_checkpoint(tmp_path / "out" / "checkpoint")
    assert_close(resumed.model.term_vector(), trained, atol=0)

    # a copy saved by the encoder keeps it; weights without the config flag are refused
    enc = LensEncoder.from_pretrained(out, merge_adapter=False)
    enc.save_pretrained(tmp_path / "copy")
    assert_close(LensEncoder.from_pretrained(tmp_path / "copy").encode_documents(texts), got, atol=1e-5)
    conf = json.loads((tmp_path / "copy" / "config.json").read_text())
    conf["term_channel"] = False
    (tmp_path / "copy" / "config.json").write_text(json.dumps(conf))
    with pytest.raises(ValueError, match="term_channel"):
        read_model_dir(tmp_path / "copy")


def test_a_floored_model_trains_with_its_floor_and_keeps_it(tiny_lens_dir, data_file, tmp_path):  # noqa: F811
    """``term_floor`` in a model's config is applied in the model's forward, so a run from that model trains the
    floored vectors its encoder will give, and the trained model keeps the floor."""
    from lens.config import LensConfig
    from lens.encoder import LensEncoder
    from lens.pooling import term_floor
    from lens.train.trainer import Trainer

    floored = lens_dir_copy(tiny_lens_dir, tmp_path / "floored", term_floor=0.5)
    texts = ["cancer drug trial", "mouse gene expression levels"]
    plain = LensEncoder.from_pretrained(tiny_lens_dir)
    enc = LensEncoder.from_pretrained(floored)
    assert enc.model.term_floor == 0.5 and enc.model.term is None  # the floor without the channel
    items = plain.encode_documents(texts, normalize=False)
    own = [plain.assignment[np.asarray(plain.tokenizer(t, add_special_tokens=False)["input_ids"])] for t in texts]
    want = term_floor(items, own, 0.5)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert_close(enc.encode_documents(texts), want, atol=1e-5)
    t = Trainer(_config(floored, data_file, lora_layers=1), tmp_path / "out", show_progress_bar=False)
    assert t.model.term_floor == 0.5
    out = t.train()
    assert LensConfig.load(out).term_floor == 0.5
    with torch.no_grad():
        t.decoder.eval()
        trained = t.encode(texts)
    assert_close(LensEncoder.from_pretrained(out).encode_documents(texts), trained, atol=1e-4)


def test_cluster_vocab_writes_the_flag(tiny_backbone_dir, tmp_path):
    from lens.cli import main

    out = tmp_path / "k8"
    assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--clusters", "8", "--term-channel",
                 "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["term_channel"] is True


def test_special_token_ids_join_the_added_special_tokens_and_the_named_ones():
    """Both the clustering's exclusion and the term channel leave out every special token: the named ones (BOS,
    EOS, padding) and the added ones marked special (chat and file markers), within the matrix's rows."""
    from types import SimpleNamespace

    from lens.backbone import special_token_ids
    from lens.encoder import term_clusters_of

    tok = SimpleNamespace(all_special_ids=[0, 2, None],
                          added_tokens_decoder={0: SimpleNamespace(special=True), 5: SimpleNamespace(special=True),
                                                6: SimpleNamespace(special=False), 40: SimpleNamespace(special=True)})
    assert special_token_ids(tok, 10) == [0, 2, 5]
    assignment = np.arange(10) % 3
    got = term_clusters_of(assignment, tok)
    assert got.tolist() == [-1, 1, -1, 0, 1, -1, 0, 1, 2, 0] and assignment[0] == 0  # the input is not changed


def test_the_channel_alone_trains_on_a_frozen_model(term_dir, data_file, tmp_path):  # noqa: F811
    """lora_layers=0 with the head frozen trains the term channel alone: the decoder and the head keep every weight
    (the cache holds every layer's output), the model is written without an adapter, and a run stopped at a
    checkpoint resumes to the uninterrupted run's channel."""
    from lens.encoder import LensEncoder
    from lens.train.trainer import Trainer

    cfg = _config(term_dir, data_file, lora_layers=0, train_head=False, lr=5e-2, head_lr=5e-2)
    t = Trainer(cfg, tmp_path / "out", show_progress_bar=False)
    assert t.peft_model is None and t.cache is not None
    assert [g["name"] for g in t.optimizer.param_groups] == ["term"]
    decoder = {k: v.clone() for k, v in t.decoder.state_dict().items()}
    head = t.model.head.weight.detach().clone()
    out = t.train()
    assert all(torch.equal(v, decoder[k]) for k, v in t.decoder.state_dict().items())
    assert torch.equal(t.model.head.weight, head)
    trained = t.model.term_vector()
    assert not np.allclose(trained, np.r_[np.zeros(trained.size - 1), TERM_BIAS_INIT])
    conf = json.loads((out / "config.json").read_text())
    assert conf.get("adapter") is None and not (out / "adapter").exists()
    assert "No LoRA" in (out / "README.md").read_text()
    texts = ["cancer drug trial", "mouse gene expression levels"]
    with torch.no_grad():
        want = t.encode(texts)
    assert_close(LensEncoder.from_pretrained(out).encode_documents(texts), want, atol=1e-4)

    # stopped after step 2 (a checkpoint every 2 steps), then resumed: the same channel as the whole run
    half = Trainer(cfg, tmp_path / "half", show_progress_bar=False)
    for _ in range(2):
        half.train_step()
    half.save_checkpoint(tmp_path / "half" / "checkpoint")
    again = Trainer(cfg, tmp_path / "half", show_progress_bar=False)
    again.train(resume=True)
    assert_close(again.model.term_vector(), trained, atol=1e-6)


def test_a_frozen_run_needs_something_to_train(tiny_lens_dir, data_file, tmp_path):  # noqa: F811
    from lens.train.trainer import Trainer

    with pytest.raises(ValueError, match="nothing to train"):
        Trainer(_config(tiny_lens_dir, data_file, lora_layers=0, train_head=False), tmp_path / "out",
                show_progress_bar=False)
    with pytest.raises(ValueError, match="lora_layers must be >= 0"):
        _config(tiny_lens_dir, data_file, lora_layers=-1)


def test_cli_merge_term_channel_writes_a_trainable_start(tiny_lens_dir, data_file, tmp_path, capsys):  # noqa: F811
    """`lens merge MODEL --out START --term-channel`: the merged model with an untrained channel, whose vectors are
    the merged model's raised on the own clusters only, and which `lens train` trains; refused with --onto and on a
    model that has the channel already."""
    from lens.cli import main
    from lens.config import LensConfig
    from lens.encoder import LensEncoder

    trained, plain, start = tmp_path / "trained", tmp_path / "plain", tmp_path / "start"
    train = ["--data", str(data_file), "--steps", "1", "--lora-layers", "1", "--batch-size", "4"]
    assert main(["train", "--model", str(tiny_lens_dir), *train, "--out", str(trained)]) == 0
    assert main(["merge", str(trained), "--out", str(plain)]) == 0
    assert main(["merge", str(trained), "--out", str(start), "--term-channel"]) == 0
    assert LensConfig.load(start).term_channel and not LensConfig.load(plain).term_channel
    assert not LensConfig.load(trained).term_channel  # the source is left as it was
    text = "cell protein gene"
    a = LensEncoder.from_pretrained(plain).encode(text, normalize=False)
    b = LensEncoder.from_pretrained(start).encode(text, normalize=False)
    assert (b >= a - 1e-6).all() and (b > a + 1e-6).any()
    assert b[a > float(np.log1p(TERM_BIAS_INIT)) + 1e-6] == pytest.approx(a[a > float(np.log1p(TERM_BIAS_INIT)) + 1e-6])
    out = tmp_path / "again"
    assert main(["train", "--model", str(start), *train, "--out", str(out)]) == 0
    from safetensors import safe_open

    with safe_open(str(out / "clusters.safetensors"), framework="np") as f:
        assert {"term_weight", "term_bias"} <= set(f.keys())
    capsys.readouterr()
    assert main(["merge", str(out), "--out", str(tmp_path / "y"), "--term-channel"]) == 2
    assert "has a term channel already" in capsys.readouterr().err
    assert main(["merge", str(trained), "--onto", str(tiny_lens_dir), "--out", str(tmp_path / "x"),
                 "--term-channel"]) == 2
    assert "drop --onto" in capsys.readouterr().err
