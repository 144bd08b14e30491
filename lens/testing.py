"""Test fixtures that the tests and the benchmark scripts share (``benchmarks/reliability.py`` builds the same
tiny models, corpora and faults as ``tests/test_reliability.py``): tiny random decoders and a word-level tokenizer,
built in memory or saved like a user's local HF model; small seeded BEIR-style corpora; and Python programs that
play a fault in a second process (``python -c SCRIPT ARGS...``).

Nothing in the library imports this module (it sits above it, beside the CLI). ``transformers``, ``tokenizers`` and
``torch`` are imported when a builder runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["CORPUS_WORDS", "FAMILIES", "SPECIALS", "WORDS", "make_causal_lm", "make_index", "make_tokenizer",
           "save_tiny_backbone", "write_corpus", "DISK_FULL_SAVE", "HOLD_LOCK", "KILL_BETWEEN_RENAMES", "MAKE_INDEX",
           "SAVE_LOOP", "SLOW_BUILD"]

# ---------------------------------------------------------------------------------------------- tiny models
WORDS = (
    "the a of and to in is was for on with as by at from that this it be are or an which review reviews "
    "reviewed paper study cell cells protein gene genes cancer patients results data model models method "
    "methods effect effects analysis high low increase decrease show shows found using based new used two "
    "one three between after during we our these than more most also may can not no human mouse blood "
    "brain risk treatment clinical trial disease drug drugs dose response expression level levels role"
).split()
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0-3: unk, BOS, EOS, pad
FAMILIES = ("llama", "mistral", "qwen2")


def make_tokenizer(words: Sequence[str] = WORDS):
    """A word-level fast tokenizer of ``SPECIALS + words`` (whitespace split, unknown words to ``<unk>``)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate([*SPECIALS, *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tok.padding_side = "right"
    return tok


def make_causal_lm(family: str, vocab_size: int, attn_implementation: str = "sdpa", seed: int = 0, **config):
    """A random 2-layer decoder of ``family`` (one of ``FAMILIES``; hidden 32, 4 heads, 2 KV heads), in eval mode,
    its weights drawn after ``torch.manual_seed(seed)``; ``config``: more settings of its config (a sliding
    window)."""
    import torch
    from transformers import (
        LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
    )

    classes = {
        "llama": (LlamaConfig, LlamaForCausalLM, {"tie_word_embeddings": True}),
        "mistral": (MistralConfig, MistralForCausalLM, {"tie_word_embeddings": False}),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM, {"tie_word_embeddings": True}),
    }
    if family not in classes:
        raise ValueError(f"unknown family {family!r}; valid: {', '.join(classes)}")
    config_cls, model_cls, extra = classes[family]
    common = dict(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=3,
        attn_implementation=attn_implementation,
    )
    torch.manual_seed(seed)
    return model_cls(config_cls(**{**common, **extra, **config})).eval()


def save_tiny_backbone(directory: str | Path, seed: int = 0, words: Sequence[str] = WORDS,
                       family: str = "llama") -> Path:
    """A tiny random decoder and its word-level tokenizer saved in ``directory`` like a user's local HF model
    (safetensors); returns the directory."""
    directory = Path(directory)
    tokenizer = make_tokenizer(words)
    make_causal_lm(family, len(tokenizer), seed=seed).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# ---------------------------------------------------------------------------------------------- corpora
CORPUS_WORDS = "cell gene protein cancer patients drug dose mouse brain blood risk treatment".split()  # all in WORDS


def write_corpus(path: str | Path, n: int, prefix: str = "d", seed: int = 0, words: Sequence[str] = CORPUS_WORDS,
                 lengths: tuple[int, int] = (2, 9)) -> Path:
    """A JSONL corpus of ``n`` documents ``{prefix}0`` ..: the title is ``words[i]`` in turn, the text
    ``lengths[0]`` to ``lengths[1] - 1`` words drawn with ``seed``. Returns ``path``."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(rng.choice(words, size=int(rng.integers(*lengths))))
            f.write(json.dumps({"_id": f"{prefix}{i}", "title": words[i % len(words)], "text": text}) + "\n")
    return Path(path)


# ---------------------------------------------------------------------------------------------- faults
# ``MAKE_INDEX`` is the prelude of the index scripts: ``make(prefix, n, seed)``, a small random ``HybridIndex`` of
# ids ``{prefix}0`` .. (index only, no torch, so the process starts fast); ``make_index`` runs the same function in
# the calling process, to build what a script saved and compare.
MAKE_INDEX = """
import numpy as np
from index import HybridIndex

def make(prefix, n, seed):
    rng = np.random.default_rng(seed)
    lex = np.abs(rng.standard_normal((n, 24))).astype(np.float32)
    index = HybridIndex(24, 8, weights=(0.6, 0.4))
    index.add([f"{prefix}{i}" for i in range(n)], lex, rng.standard_normal((n, 8)).astype(np.float32),
              metadata=[{"i": i} for i in range(n)])
    return index
"""
# ARGS: directory, what it is ("index", "model directory"), a file to create once the writer lock is held.
# Holds the lock until its stdin is closed.
HOLD_LOCK = """
import sys
from pathlib import Path
from lens.atomic import DirectoryLock
with DirectoryLock(sys.argv[1], sys.argv[2]):
    Path(sys.argv[3]).touch()
    sys.stdin.read()  # until the caller closes our stdin
"""

# ARGS: started file, go file, then the arguments of `lens`. Runs `lens ARGS`, whose first chunk to encode touches
# the started file and waits for the go file (at most 240 s).
SLOW_BUILD = """
import sys, time
from pathlib import Path
import lens.indexing as indexing

real, started, go = indexing.encode_chunk, Path(sys.argv[1]), Path(sys.argv[2])

def slow(*args):
    started.touch()
    deadline = time.time() + 240
    while not go.exists() and time.time() < deadline:
        time.sleep(0.05)
    return real(*args)

indexing.encode_chunk = slow
from lens.cli import main
sys.exit(main(sys.argv[3:]))
"""

# ARGS: target, seconds. Saves make("a", 300, 0) and make("b", 200, 1) to the target in turn for that long;
# prints "ready" after the first save, then the number of saves.
SAVE_LOOP = MAKE_INDEX + """
import sys, time
target, seconds = sys.argv[1], float(sys.argv[2])
versions = [make("a", 300, 0), make("b", 200, 1)]
versions[0].save(target)
print("ready", flush=True)
n, t0 = 0, time.time()
while time.time() - t0 < seconds:
    versions[n % 2].save(target)
    n += 1
print(n, flush=True)
"""

# ARGS: target. Saves make("a", 300, 0), then dies (SIGKILL) between the two renames of saving make("b", 200, 1).
KILL_BETWEEN_RENAMES = MAKE_INDEX + """
import os, signal, sys
import lens.atomic.writes
make("a", 300, 0).save(sys.argv[1])
lens.atomic.writes.between_renames_hook = lambda old, new: os.kill(os.getpid(), signal.SIGKILL)
make("b", 200, 1).save(sys.argv[1])
"""

# ARGS: target, a file-size limit in bytes. Saves make("a", 20, 0), then make("b", 3000, 1) under the limit; prints
# the error's type and errno on one line, its message on the next.
DISK_FULL_SAVE = MAKE_INDEX + """
import resource, signal, sys
make("a", 20, 0).save(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so that writing past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
try:
    make("b", 3000, 1).save(sys.argv[1])
except Exception as e:
    print(type(e).__name__, getattr(e, "errno", None))
    print(e)
"""


def make_index(prefix: str, n: int, seed: int):
    """``MAKE_INDEX``'s ``make`` in this process: the index that a fault script built from the same arguments."""
    namespace: dict = {}
    exec(MAKE_INDEX, namespace)
    return namespace["make"](prefix, n, seed)
