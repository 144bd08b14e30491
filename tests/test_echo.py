"""Echo input (issue 39's exact terms): each text written twice and the second copy pooled, so under causal
attention the position that stands for a token has read it. The layout against a hand-built sequence, then the
config, encoder, trainer and CLI that carry it."""

import json

import numpy as np
import pytest
import torch

from lens.inputs import encode_texts, special_ids, text_ids

from conftest import assert_close, lens_dir_copy
from test_train import _config, data_file  # noqa: F401  (the toy training file fixture)


def test_echo_layout_against_a_hand_built_sequence(tokenizer):
    start, eos = special_ids(tokenizer)
    prompt = tokenizer("review the paper", add_special_tokens=False)["input_ids"]
    ids = tokenizer("cell protein gene", add_special_tokens=False)["input_ids"]
    (plain,) = encode_texts(tokenizer, ["cell protein gene"], 64, prompt="review the paper")
    (echo,) = encode_texts(tokenizer, ["cell protein gene"], 64, prompt="review the paper", echo=True)
    assert echo.ids == [start, *prompt, *ids, *ids, eos]
    assert echo.pool == [0] * (1 + len(prompt) + len(ids)) + [1] * (len(ids) + 1)
    assert plain.ids == [start, *prompt, *ids, eos]
    assert text_ids(echo) == text_ids(plain) == ids  # the text's own tokens are the same either way
    # the text is cut as without echo, then written twice: the sequence may pass max_length, the text never does
    (cut,) = encode_texts(tokenizer, ["cell " * 50], 10, echo=True)
    (cut_plain,) = encode_texts(tokenizer, ["cell " * 50], 10)
    assert cut.truncated and cut_plain.truncated
    assert text_ids(cut) == text_ids(cut_plain) and len(text_ids(cut)) == 8
    assert len(cut.ids) == 1 + 2 * 8 + 1


def test_echo_needs_the_lens_convention(tokenizer):
    with pytest.raises(ValueError, match="echo needs the LENS convention"):
        encode_texts(tokenizer, ["cell"], 16, convention="paper", echo=True)


def test_config_writes_echo_only_when_on_and_checks_it(tiny_lens_dir):
    from lens.config import LensConfig

    config = LensConfig.load(tiny_lens_dir)
    assert config.echo is False and "echo" not in config.to_dict()
    config.echo = True
    data = config.to_dict()
    assert data["echo"] is True and LensConfig.from_dict(data).echo is True
    with pytest.raises(ValueError, match="echo 'yes'"):
        LensConfig.from_dict({**data, "echo": "yes"})
    with pytest.raises(ValueError, match="echo needs the LENS convention"):
        LensConfig.from_dict({**data, "convention": "paper"})


@pytest.fixture
def echo_dir(tiny_lens_dir, tmp_path):
    # causal: echo's point is that under causal attention the second copy has read the whole text
    return lens_dir_copy(tiny_lens_dir, tmp_path / "echo", echo=True, attention="causal")


def test_an_echo_longer_than_the_backbone_positions_is_warned_of(tiny_lens_dir, tmp_path, caplog):
    """The tiny backbone has 512 positions: echo at max_length 512 can write 1022 tokens, at 257 exactly 512."""
    import logging

    from lens.encoder import LensEncoder

    for max_length, warned in ((512, True), (257, False)):
        d = lens_dir_copy(tiny_lens_dir, tmp_path / f"echo-{max_length}", echo=True, max_length=max_length)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            LensEncoder.from_pretrained(d)
        said = f"can take {2 * max_length - 2} positions, more than the backbone's 512" in caplog.text
        assert said == warned and (not warned or "to 257" in caplog.text)


def test_encoder_pools_the_second_copy_of_an_echoed_forward(echo_dir):
    """The encoder's vector is the max over the logits that predict the second copy's tokens and the EOS, taken
    from one plain causal forward of the doubled sequence computed here by hand."""
    from lens.encoder import LensEncoder

    enc = LensEncoder.from_pretrained(echo_dir)
    assert enc.fingerprint()["lens_echo"] is True
    text = "cell protein gene cancer"
    got = enc.encode(text, normalize=False)
    ids = enc.tokenizer(text, add_special_tokens=False)["input_ids"]
    start, eos = special_ids(enc.tokenizer)
    seq = torch.tensor([[start, *ids, *ids, eos]])
    with torch.no_grad():
        hidden = enc.model.decoder(input_ids=seq, attention_mask=torch.ones_like(seq)).last_hidden_state[0]
        logits = hidden @ enc.model.head.weight.T
    first = 1 + len(ids)  # the second copy's first token; its logits are at the position before it
    want = torch.log1p(torch.relu(logits[first - 1 : len(seq[0]) - 1])).max(dim=0).values.float().numpy()
    assert_close(got, want, atol=1e-5)
    # under causal attention the second copy's positions read the whole text: changing the text's last word
    # changes the weight the copy's first token gets, which without echo no later word could
    a, b = "cell protein gene cancer", "cell protein gene mouse"
    first_echo = [_first_token_logits(enc, t, echo=True) for t in (a, b)]
    first_plain = [_first_token_logits(enc, t, echo=False) for t in (a, b)]
    assert not torch.allclose(*first_echo) and torch.allclose(*first_plain)


def _first_token_logits(enc, text, echo):
    from lens.inputs import pad_batch

    (item,) = encode_texts(enc.tokenizer, [text], 64, echo=echo)
    batch = pad_batch([item], enc.tokenizer.pad_token_id)
    with torch.no_grad():
        hidden = enc.model.decoder(input_ids=batch["input_ids"],
                                   attention_mask=batch["attention_mask"]).last_hidden_state[0]
    first = item.pool.index(1)
    return hidden[first - 1]  # the hidden state whose logits stand for the text's first token


def test_trainer_trains_on_the_echoed_texts(echo_dir, data_file, tmp_path):  # noqa: F811
    """The trainer tokenises as the model encodes: its cached items are echoed, and what it saves keeps echo on."""
    from lens.config import LensConfig
    from lens.train.trainer import Trainer

    t = Trainer(_config(echo_dir, data_file, lora_layers=1), tmp_path / "out", show_progress_bar=False)
    (prompt, query), item = next((k, v) for k, v in t._items.items() if k[0])
    ids = t.tokenizer(query, add_special_tokens=False)["input_ids"][: len(text_ids(item))]
    assert text_ids(item) == ids and item.ids[-2 * len(ids) - 1 : -1] == ids + ids
    out = t.train()
    assert LensConfig.load(out).echo is True
    assert json.loads((out / "config.json").read_text())["echo"] is True


def test_cli_merge_echo_writes_a_start_and_refuses_what_it_cannot(tiny_lens_dir, data_file, tmp_path,  # noqa: F811
                                                                   capsys):
    from lens.cli import main
    from lens.config import LensConfig
    from lens.encoder import LensEncoder

    trained, start = tmp_path / "trained", tmp_path / "start"
    train = ["--data", str(data_file), "--steps", "1", "--lora-layers", "1", "--batch-size", "4"]
    assert main(["train", "--model", str(tiny_lens_dir), *train, "--out", str(trained)]) == 0
    assert main(["merge", str(trained), "--out", str(start), "--echo"]) == 0
    assert LensConfig.load(start).echo and not LensConfig.load(trained).echo
    text = "cell protein gene"
    a = LensEncoder.from_pretrained(trained).encode(text, normalize=False)
    b = LensEncoder.from_pretrained(start).encode(text, normalize=False)
    assert not np.allclose(a, b)  # the same weights read the doubled text
    capsys.readouterr()
    assert main(["merge", str(start), "--out", str(tmp_path / "y"), "--echo"]) == 2
    assert "no adapter to merge" in capsys.readouterr().err
    again = tmp_path / "again"
    assert main(["train", "--model", str(start), *train, "--out", str(again)]) == 0
    assert main(["merge", str(again), "--out", str(tmp_path / "z"), "--echo"]) == 2
    assert "reads its texts with echo already" in capsys.readouterr().err
    assert main(["merge", str(trained), "--onto", str(tiny_lens_dir), "--out", str(tmp_path / "x"), "--echo"]) == 2
    assert "drop --onto" in capsys.readouterr().err


def test_cluster_vocab_echo_flag(tiny_backbone_dir, tmp_path):
    from lens.cli import main
    from lens.config import LensConfig

    out = tmp_path / "k8"
    assert main(["cluster-vocab", "--model", str(tiny_backbone_dir), "--clusters", "8", "--echo", "--out",
                 str(out)]) == 0
    assert LensConfig.load(out).echo is True
