"""A LENS directory as a sentence-transformers SparseEncoder: LensEncoder's vectors exactly, on the tiny model."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("sentence_transformers", minversion="5")

from sentence_transformers import SparseEncoder  # noqa: E402
from sentence_transformers import __version__ as st_version  # noqa: E402

from conftest import assert_close  # noqa: E402
from lens.encoder import LensEncoder  # noqa: E402
from lens.integrations.sentence_transformers import (  # noqa: E402
    LensSparseModule, add_st_files, cluster_label, load_sparse_encoder, query_prompt,
)
from lens.model_dir import ST_CONFIG_NAME, ST_MODULE, ST_MODULES_NAME  # noqa: E402

TEXTS = ["the review of cell data", "protein gene expression in mouse brain", "", "clinical trial of a new drug",
         "a study"]
INSTRUCTION = "Given a scientific claim, retrieve documents that support or refute the claim"


def dense(x) -> np.ndarray:
    x = x.to_dense() if x.is_sparse else x
    return x.detach().cpu().numpy()


@pytest.fixture(scope="module")
def st_model(tiny_lens_dir):
    return SparseEncoder(str(tiny_lens_dir), trust_remote_code=True, device="cpu")


def test_every_model_directory_names_the_lens_module(tiny_lens_dir, tiny_encoder):
    modules = json.loads((tiny_lens_dir / ST_MODULES_NAME).read_text())
    assert modules == [{"idx": 0, "name": "0", "path": "", "type": ST_MODULE}]
    assert ST_MODULE == f"{LensSparseModule.__module__}.{LensSparseModule.__name__}"
    settings = json.loads((tiny_lens_dir / ST_CONFIG_NAME).read_text())
    assert settings["model_type"] == "SparseEncoder" and settings["similarity_fn_name"] == "cosine"
    assert settings["prompts"] == {"query": tiny_encoder.config.default_instruction, "document": ""}


def test_queries_and_documents_equal_lens_encoder(st_model, tiny_encoder):
    assert isinstance(st_model[0], LensSparseModule) and st_model.get_embedding_dimension() == 16
    q = dense(st_model.encode_query(TEXTS))
    assert_close(q, tiny_encoder.encode_queries(TEXTS))  # the directory's default instruction
    assert_close(dense(st_model.encode_query(TEXTS, prompt=INSTRUCTION)),
                 tiny_encoder.encode_queries(TEXTS, instruction=INSTRUCTION))
    d = dense(st_model.encode_document(TEXTS))
    assert_close(d, tiny_encoder.encode_documents(TEXTS))
    assert_close(dense(st_model.encode(TEXTS)), d)  # no prompt: a document
    assert_close(dense(st_model.encode_document(TEXTS[1])), tiny_encoder.encode_documents(TEXTS[1]))
    assert not q[2].any() and not d[2].any()  # a blank text is all zeros, as in LensEncoder
    assert np.allclose(np.linalg.norm(d[[0, 1, 3, 4]], axis=1), 1.0, atol=1e-6)  # unit vectors by default


def test_the_instruction_is_put_in_the_template_and_never_pooled(st_model, tiny_encoder):
    with_instruction = dense(st_model.encode_query(TEXTS[:2], prompt=INSTRUCTION))
    assert not np.allclose(with_instruction, dense(st_model.encode_document(TEXTS[:2])), atol=1e-4)
    templated = tiny_encoder.config.query_template.format(instruction=INSTRUCTION)
    assert_close(dense(st_model.encode_query(TEXTS[:2], prompt=templated)), with_instruction)
    features = st_model[0].preprocess(["cell data"], prompt=INSTRUCTION)
    prompt_ids = tiny_encoder.tokenizer(templated, add_special_tokens=False)["input_ids"]
    assert features["pool_mask"][0].tolist() == [0] * (1 + len(prompt_ids)) + [1, 1, 1]  # text + EOS only


def test_query_prompt_wraps_an_instruction_once():
    template = "<instruct>{instruction}\n<query>"
    assert query_prompt(template, None) is None and query_prompt(template, "") is None
    assert query_prompt(template, "Find it") == "<instruct>Find it\n<query>"
    assert query_prompt(template, "<instruct>Find it\n<query>") == "<instruct>Find it\n<query>"
    assert query_prompt("query: ", "Find it") == "Find it"  # a template without an instruction slot


def test_similarity_is_cosine(st_model, tiny_encoder):
    assert st_model.similarity_fn_name == "cosine"
    q, d = st_model.encode_query(TEXTS[:2]), st_model.encode_document(TEXTS)
    raw_q = tiny_encoder.encode_queries(TEXTS[:2], normalize=False)
    raw_d = tiny_encoder.encode_documents(TEXTS, normalize=False)
    norms = np.linalg.norm(raw_q, axis=1)[:, None] * np.linalg.norm(raw_d, axis=1)[None, :]
    expected = np.divide(raw_q @ raw_d.T, norms, out=np.zeros_like(norms), where=norms > 0)
    assert_close(st_model.similarity(q, d), expected)


def test_decode_names_the_heaviest_clusters(st_model, tiny_encoder):
    emb = st_model.encode_document(TEXTS[1])
    decoded = st_model.decode(emb, top_k=3)
    top = tiny_encoder.explain(TEXTS[1], top_k=3, tokens=12)  # explain's tokens lead with the text's; a label's not
    assert [label for label, _ in decoded] == [cluster_label(tiny_encoder.cluster_tokens(c.cluster, 12), c.cluster)
                                               for c in top]
    weights = tiny_encoder.encode_documents(TEXTS[1])
    assert_close([w for _, w in decoded], [weights[c.cluster] for c in top])
    both = st_model.decode(st_model.encode_document(TEXTS[:2]), top_k=2)
    assert len(both) == 2 and [label for label, _ in both[1]] == [label for label, _ in decoded[:2]]
    assert cluster_label(["\u2581a", " b", " ", "b", "c"], 7) == "\u2581a|b|' '" and cluster_label([], 7) == "cluster 7"
    assert cluster_label(["n", " n", "m"], 7, size=2) == "n|m"


def test_max_active_dims_keeps_the_heaviest_clusters(st_model, tiny_encoder):
    full = tiny_encoder.encode_documents(TEXTS)
    pruned = dense(st_model.encode_document(TEXTS, max_active_dims=2))
    for row, ref in zip(pruned, full):
        kept = np.flatnonzero(row)
        assert len(kept) == min(2, np.count_nonzero(ref))
        assert set(kept) <= set(np.argsort(-ref)[:2]) and np.allclose(row[kept], ref[kept], atol=1e-6)
    limited = load_sparse_encoder(tiny_encoder, max_active_dims=3)
    assert max(np.count_nonzero(r) for r in dense(limited.encode_document(TEXTS))) == 3


def test_load_sparse_encoder_needs_no_trust_flag(tiny_lens_dir, tiny_encoder):
    model = load_sparse_encoder(tiny_lens_dir, device="cpu")
    assert model.similarity_fn_name == "cosine" and model.prompts["query"] == tiny_encoder.config.default_instruction
    assert_close(dense(model.encode_query(TEXTS)), tiny_encoder.encode_queries(TEXTS))
    assert_close(dense(model.encode_document(TEXTS)), tiny_encoder.encode_documents(TEXTS))


@pytest.mark.skipif(int(st_version.split(".")[0]) < 6, reason="sentence-transformers < 6 imports it unasked")
def test_sentence_transformers_6_asks_for_trust_remote_code(tiny_lens_dir):
    with pytest.raises(ValueError, match="trust_remote_code"):
        SparseEncoder(str(tiny_lens_dir), device="cpu")


def test_a_sparse_encoder_save_is_a_lens_directory(tmp_path, tiny_encoder):
    model = load_sparse_encoder(tiny_encoder, prompts={"scifact": INSTRUCTION})
    model.save(str(tmp_path / "copy"))
    copy = LensEncoder.from_pretrained(tmp_path / "copy")
    assert_close(copy.encode_queries(TEXTS), tiny_encoder.encode_queries(TEXTS))
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no staging directory or lock left
    again = SparseEncoder(str(tmp_path / "copy"), trust_remote_code=True, device="cpu")
    assert again.prompts["scifact"] == INSTRUCTION  # SparseEncoder's own settings survive the LENS write
    assert_close(dense(again.encode_query(TEXTS, prompt_name="scifact")),
                 tiny_encoder.encode_queries(TEXTS, instruction=INSTRUCTION))
    model.save(str(tmp_path / "copy"))  # saving over it again replaces the LENS files in place
    assert_close(LensEncoder.from_pretrained(tmp_path / "copy").encode_documents(TEXTS),
                 tiny_encoder.encode_documents(TEXTS))


def test_an_older_directory_is_upgraded_in_place(tmp_path, tiny_lens_dir, tiny_encoder):
    old = tmp_path / "old"
    shutil.copytree(tiny_lens_dir, old)
    for name in (ST_MODULES_NAME, ST_CONFIG_NAME):
        (old / name).unlink()
    assert_close(LensEncoder.from_pretrained(old).encode_documents(TEXTS), tiny_encoder.encode_documents(TEXTS))
    with pytest.raises(Exception):  # no modules.json: sentence-transformers takes it for a plain HF model
        SparseEncoder(str(old), trust_remote_code=True, device="cpu")
    assert add_st_files(old) == old.resolve()
    assert (old / ST_MODULES_NAME).read_bytes() == (tiny_lens_dir / ST_MODULES_NAME).read_bytes()
    model = SparseEncoder(str(old), trust_remote_code=True, device="cpu")
    assert_close(dense(model.encode_query(TEXTS)), tiny_encoder.encode_queries(TEXTS))
    (old / ST_CONFIG_NAME).write_text(json.dumps({"model_type": "SparseEncoder", "prompts": {"query": "mine"}}))
    add_st_files(old)  # files already there are kept
    assert json.loads((old / ST_CONFIG_NAME).read_text())["prompts"] == {"query": "mine"}


def test_an_in_memory_encoder_registers_its_weights(tiny_encoder):
    in_memory = LensEncoder(tiny_encoder.model, tiny_encoder.tokenizer, tiny_encoder.config, tiny_encoder.assignment)
    model = load_sparse_encoder(in_memory, device="cpu")  # no directory: the config's instruction, cosine
    assert {id(p) for p in model.parameters()} == {id(p) for p in tiny_encoder.model.parameters()}  # .to() moves them
    assert model.similarity_fn_name == "cosine"
    assert_close(dense(model.encode_query(TEXTS)), tiny_encoder.encode_queries(TEXTS))


def test_encode_takes_the_keywords_sentence_transformers_evaluators_pass(tiny_encoder):
    """ST's evaluators call encode_query / encode_document with truncate_dim, convert_to_tensor and the rest
    (InformationRetrievalEvaluator.embed_inputs); a LensEncoder takes them and gives its own vectors."""
    st_kwargs = dict(prompt_name=None, prompt=None, batch_size=2, show_progress_bar=False, convert_to_tensor=True,
                     truncate_dim=None)
    texts = ["cancer drug trial", "gene expression in the mouse brain"]
    assert_close(dense(tiny_encoder.encode_query(texts, **st_kwargs)), tiny_encoder.encode_queries(texts))
    assert_close(dense(tiny_encoder.encode_document(texts, **st_kwargs)), tiny_encoder.encode_documents(texts))
    for bad, words in (({"truncate_dim": 8}, "clusters"), ({"precision": "int8"}, "float32"),
                       ({"output_value": "token_embeddings"}, "token"), ({"device": "meta"}, "runs on")):
        with pytest.raises(ValueError, match=words):
            tiny_encoder.encode(["a study"], **bad)
    assert tiny_encoder.encode("a study", truncate_dim=None, precision="float32", output_value=None,
                               device="cpu").shape == (tiny_encoder.num_clusters,)


def test_numpy_integers_are_integers(tiny_encoder):
    v = tiny_encoder.encode(["a study", "cell data"], batch_size=np.int64(1))
    assert_close(v, tiny_encoder.encode(["a study", "cell data"]))
    assert tiny_encoder.decode(v[0], top_k=np.int32(2)) == tiny_encoder.decode(v[0], top_k=2)


def test_the_module_reads_texts_with_the_encoders_casing_table(tiny_lens_dir, tiny_encoder):
    """An index sets its corpus's casing table on the encoder; SparseEncoder over that encoder reads texts the same."""
    from sentence_transformers import SparseEncoder

    from lens.casing import CasingTable

    enc = LensEncoder.from_pretrained(tiny_lens_dir, text_normalization="truecase-shouted")
    table = CasingTable(forms={"cells": "CeLLs"}, known=frozenset({"in", "cells", "now", "yap"}))
    assert table.truecase("YAP IN CELLS NOW") == "Yap in CeLLs now"  # the packaged table: "YAP in cells now"
    enc.casing_table = table
    st = SparseEncoder(modules=[LensSparseModule(enc)], device="cpu")
    got = dense(st.encode_document(["YAP IN CELLS NOW", "a study"]))
    assert_close(got, enc.encode_documents(["YAP IN CELLS NOW", "a study"]))
    assert_close(got[0], tiny_encoder.encode_documents("Yap in CeLLs now"))
    assert not np.allclose(got[0], tiny_encoder.encode_documents("YAP in cells now"), atol=1e-4)
