"""LensEncoder.encode throughput against the bare backbone forward, same inputs and batch sizes, one run.

The baseline gets its inputs pre-tokenised and pre-padded (exactly the batches the encoder builds), and runs
only the decoder; LENS pays for tokenisation, sorting, the cluster head, pooling and copying out. The ratio
(LENS docs/s over bare docs/s) is the overhead of everything LENS adds. Also times `lens cluster-vocab`
(k=4000) as a user runs it, process start included.

    python benchmarks/speed_encode.py --model default --out benchmarks/results/speed_encode.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl.gz"


def load_texts(n: int) -> tuple[list[str], str]:
    """SciFact abstracts when ../shared is there, else passages of the stdlib's pydoc topics."""
    if SCIFACT.is_file():
        with gzip.open(SCIFACT, "rt", encoding="utf-8") as f:
            docs = [json.loads(line) for _, line in zip(range(n), f)]
        return [f"{d['title']}\n{d['text']}" for d in docs], "beir/scifact corpus (first docs)"
    from pydoc_data.topics import topics

    return [t[:1500] for t in list(topics.values())[:n]], "pydoc_data.topics"


def paired_batches(encoder, texts: list[str], batch_size: int) -> list[tuple[list[str], dict]]:
    """The encoder's own batches: (texts of the batch, its padded tensors) in length-sorted order."""
    from lens.inputs import encode_texts, length_sorted_batches, pad_batch

    items = encode_texts(encoder.tokenizer, texts, encoder.max_seq_length)
    batches = length_sorted_batches([len(it.ids) for it in items], batch_size)
    return [([texts[j] for j in b], pad_batch([items[j] for j in b], encoder.tokenizer.pad_token_id))
            for b in batches]


def time_bare(encoder, batch: dict) -> float:
    """The decoder alone on pre-tokenised, pre-padded tensors (no head, no pooling, no tokenisation)."""
    start = time.perf_counter()
    with torch.inference_mode():
        encoder.model.decoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              position_ids=(batch["attention_mask"].cumsum(-1) - 1).clamp(min=0), use_cache=False)
    return time.perf_counter() - start


def time_lens(encoder, texts: list[str], batch_size: int) -> float:
    """The whole public call: tokenise, sort, forward, cluster head, pooling, normalise, copy out."""
    start = time.perf_counter()
    encoder.encode(texts, batch_size=batch_size, show_progress_bar=False)
    return time.perf_counter() - start


def time_cluster_vocab(model: str, k: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "lens.cli", "cluster-vocab", "--model", model, "--clusters", str(k),
               "--out", str(Path(tmp) / "out")]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default", help="LENS directory or 'default'")
    ap.add_argument("--backbone-ref", default="default", help="backbone for the cluster-vocab timing")
    ap.add_argument("--docs", type=int, default=48)
    ap.add_argument("--batch-sizes", default="1,8,32")
    ap.add_argument("--repeats", type=int, default=3, help="take the best of this many (interleaved)")
    ap.add_argument("--clusters", type=int, default=4000)
    ap.add_argument("--skip-cluster-vocab", action="store_true")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: torch's choice); 1 is steadier when other jobs share the CPU")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "speed_encode.json")
    args = ap.parse_args()

    from lens.encoder import LensEncoder

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_start = _loadavg()
    encoder = LensEncoder.from_pretrained(args.model, device="cpu")
    texts, source = load_texts(args.docs)
    from lens.inputs import encode_texts

    lengths = [len(it.ids) for it in encode_texts(encoder.tokenizer, texts, encoder.max_seq_length)]
    rows = []
    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        pairs = paired_batches(encoder, texts, bs)
        time_lens(encoder, pairs[0][0], bs)  # warm-up both paths
        time_bare(encoder, pairs[0][1])
        bare, lens = [], []
        for rep in range(args.repeats):
            # Each batch is timed both ways back to back (order alternating by repeat), so a change in
            # background load hits both systems alike; a repeat's ratio compares like with like.
            tb = tl = 0.0
            for batch_texts, batch in pairs:
                if rep % 2 == 0:
                    tb += time_bare(encoder, batch)
                    tl += time_lens(encoder, batch_texts, bs)
                else:
                    tl += time_lens(encoder, batch_texts, bs)
                    tb += time_bare(encoder, batch)
            bare.append(tb)
            lens.append(tl)
        ratios = [b / l for b, l in zip(bare, lens)]
        row = {"batch_size": bs, "bare_docs_per_s": len(texts) / min(bare), "lens_docs_per_s": len(texts) / min(lens),
               "ratio": float(np.median(ratios)), "ratio_per_repeat": ratios, "bare_s": bare, "lens_s": lens,
               "loadavg_after": _loadavg()}
        rows.append(row)
        print(f"batch {bs:>3}: bare {row['bare_docs_per_s']:.2f} docs/s, LENS {row['lens_docs_per_s']:.2f} docs/s, "
              f"ratio {row['ratio']:.3f} (per repeat {', '.join(f'{r:.3f}' for r in ratios)})", flush=True)

    result = {
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "model": args.model, "num_clusters": encoder.num_clusters, "max_seq_length": encoder.max_seq_length,
        "inputs": {"source": source, "docs": len(texts), "tokens_mean": float(np.mean(lengths)),
                   "tokens_max": int(max(lengths))},
        "encode": rows, "goal_ratio": 0.90, "loadavg_start": load_start,
    }
    if not args.skip_cluster_vocab:
        t = time_cluster_vocab(args.backbone_ref, args.clusters)
        result["cluster_vocab"] = {"clusters": args.clusters, "seconds": t, "goal_seconds": 60}
        print(f"cluster-vocab k={args.clusters}: {t:.1f}s (whole command)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(_markdown(result))


def _loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _markdown(r: dict) -> str:
    lines = [
        "# Encoding speed: LensEncoder.encode vs the bare backbone forward", "",
        f"Command: `{r['command']}`  ", f"Date: {r['date']}; machine: {r['machine']['cpu']}, "
        f"{r['machine']['cores']} cores, torch {r['machine']['torch']} ({r['machine']['torch_threads']} threads)  ",
        f"Inputs: {r['inputs']['docs']} texts from {r['inputs']['source']}, mean {r['inputs']['tokens_mean']:.0f} "
        f"tokens (max {r['inputs']['tokens_max']}); model {r['model']}, k={r['num_clusters']}", "",
        "Each batch is timed both ways back to back; ratio = median over repeats of (bare time / LENS time).",
        "docs/s columns: best repeat. Load average at start and after each row (other jobs may share the CPU): "
        f"{r['loadavg_start']} -> {[row['loadavg_after'] for row in r['encode']]}", "",
        "| batch size | bare backbone docs/s | LENS encode docs/s | ratio (goal >= 0.90) | ratio per repeat |",
        "|---:|---:|---:|---:|---|",
    ]
    for row in r["encode"]:
        lines.append(f"| {row['batch_size']} | {row['bare_docs_per_s']:.2f} | {row['lens_docs_per_s']:.2f} | "
                     f"{row['ratio']:.3f} | {', '.join(f'{x:.3f}' for x in row['ratio_per_repeat'])} |")
    if "cluster_vocab" in r:
        cv = r["cluster_vocab"]
        lines += ["", f"`lens cluster-vocab --clusters {cv['clusters']}` on the default backbone, whole command: "
                      f"**{cv['seconds']:.1f} s** (goal <= {cv['goal_seconds']} s)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
