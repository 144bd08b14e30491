"""Record the shipped default's vectors that ``tests/test_real_model.py::test_shipped_default_vectors_are_unchanged``
compares against: 20 SciFact test-corpus documents (the same ids as before) and the first 5 test queries.

Run it only when the shipped default itself changes (a new trained model), never to make a refactor pass:

    python tests/data/record_default_vectors.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
SHARED = HERE.parents[2] / "shared" / "data"


def main() -> None:
    from lens.corpus import load_beir
    from lens.encoder import LensEncoder
    from lens.instructions import get_instruction

    out = HERE / "default_scifact20.npz"
    ids = np.load(out)["ids"] if out.exists() else None
    docs, queries, _ = load_beir(SHARED / "beir" / "scifact", "test")
    by_id = {d.id: d for d in docs}
    if ids is None:
        ids = np.array([d.id for d in docs[:20]])
    enc = LensEncoder.from_pretrained("default")
    got = enc.encode_documents([by_id[i].full_text for i in ids], batch_size=4, output="both")
    q = enc.encode_queries(list(queries.values())[:5], instruction=get_instruction("scifact"), output="both")
    tmp = out.with_suffix(".tmp.npz")
    np.savez(tmp, ids=ids, lexicon=got.lexicon, dense=got.dense, q_lexicon=q.lexicon, q_dense=q.dense)
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
