"""CPU encoding speed: LensEncoder.encode (float32 and int8) against the bare backbone forward, per batch size;
query latency; MiniLM as a reference; the machine's matrix throughput, to read encoding as a fraction of peak.

Per batch size, each batch is timed every way back to back (the order rotating by repeat), so a change in
background load hits all alike:

- bare: the float32 decoder alone on the batches the encoder builds (pre-tokenised, pre-padded; the encoder caps
  a CPU batch at ``cpu_batch_tokens`` padded tokens), and on plain ``batch_size``-row batches (``bare_uncapped``:
  what the encoder did before the cap);
- LENS float32 and int8: the whole public call (tokenise, sort, forward, cluster head, pooling, normalise);
- MiniLM (``lens.dense``), when installed.

Both wall time and process CPU time are recorded: with one torch thread, docs per CPU-second is steadier than wall
time when other jobs share the CPU. Queries: one at a time (the latency a search sees), at one thread, p50 / p95.
Peak: GFLOP/s of a large float32 ``torch.matmul`` and GOP/s of torch's int8 dynamic linear (the kernel of
``lens.quantize``), and ``torch._int_mm``'s for reference; FLOPs per document of the backbone (``backbone_flops``,
from its config, at the measured lengths) over that peak gives the fraction of peak reached. Also times
``lens cluster-vocab`` (k=4000) as a user runs it, process start included.

    python benchmarks/speed_encode.py --model default --threads 1 --out benchmarks/results/speed_encode.json
    python benchmarks/speed_encode.py --docs 4 --queries 4 --batch-sizes 1,4 --repeats 1 --skip-cluster-vocab \\
        --out /tmp/speed_encode.json   # a quick check of the script itself
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import RESULTS, data_dir, machine, write_markdown, write_results
from lens.eval.report import output_file
from lens.cli_args import Parser

SCIFACT = data_dir() / "beir" / "scifact"


def load_texts(n_docs: int, n_queries: int) -> tuple[list[str], list[str], str]:
    """(documents, queries, source): SciFact's first ones when ../shared is there, else pydoc topics passages
    (and their first sentences as queries)."""
    from lens.corpus import iter_corpus, load_queries, pydoc_passages

    if (SCIFACT / "corpus.jsonl.gz").is_file() or (SCIFACT / "corpus.jsonl").is_file():
        docs = [d.full_text for d in itertools.islice(iter_corpus(SCIFACT), n_docs)]
        queries = list(load_queries(SCIFACT).values())[:n_queries]
        return docs, queries, "beir/scifact (first documents and queries)"
    passages = [d.full_text for d in pydoc_passages()]
    return passages[:n_docs], [p.split(".")[0][:120] for p in passages[:n_queries]], "pydoc_data.topics"


def encoder_batches(encoder, texts: list[str], batch_size: int, capped: bool = True) -> list[dict]:
    """Padded tensors of the encoder's own batches (capped: at its ``cpu_batch_tokens``, as ``encode`` does)."""
    from lens.inputs import encode_texts, length_sorted_batches, pad_batch

    items = encode_texts(encoder.tokenizer, texts, encoder.max_seq_length)
    cap = encoder.cpu_batch_tokens if capped else None
    batches = length_sorted_batches([len(it.ids) for it in items], batch_size, cap)
    return [pad_batch([items[j] for j in b], encoder.tokenizer.pad_token_id) for b in batches]


class Clock:
    """Wall and process-CPU seconds of what runs inside ``with clock:``, accumulated."""

    def __init__(self):
        self.wall = self.cpu = 0.0

    def __enter__(self):
        self._w, self._c = time.perf_counter(), time.process_time()

    def __exit__(self, *exc):
        self.wall += time.perf_counter() - self._w
        self.cpu += time.process_time() - self._c


def run_bare(encoder, batches: list[dict]) -> None:
    """The float32 decoder alone (no head, no pooling, no tokenisation)."""
    with torch.inference_mode():
        for b in batches:
            encoder.model.decoder(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                                  position_ids=(b["attention_mask"].cumsum(-1) - 1).clamp(min=0), use_cache=False)


def time_batch_size(systems: dict, n_docs: int, repeats: int) -> dict:
    """Each system's best-repeat docs/s (wall and CPU) with the order of systems rotating by repeat."""
    names = list(systems)
    clocks = {name: [] for name in names}
    for rep in range(repeats):
        order = names[rep % len(names):] + names[: rep % len(names)]
        for name in order:
            clock = Clock()
            with clock:
                systems[name]()
            clocks[name].append(clock)
    out = {}
    for name, cs in clocks.items():
        out[name] = {"docs_per_s": n_docs / min(c.wall for c in cs), "docs_per_cpu_s": n_docs / min(c.cpu for c in cs),
                     "wall_s": [c.wall for c in cs], "cpu_s": [c.cpu for c in cs]}
    return out


def query_latency(systems: dict, queries: list[str]) -> dict:
    """Per system, p50 / p95 milliseconds of one query at a time, wall and process CPU; each query goes through
    every system back to back (the order rotating), after one warm-up call each."""
    names = list(systems)
    times = {name: ([], []) for name in names}
    for name in names:
        systems[name](queries[0])
    for i, q in enumerate(queries):
        for name in names[i % len(names):] + names[: i % len(names)]:
            start, start_cpu = time.perf_counter(), time.process_time()
            systems[name](q)
            times[name][0].append(time.perf_counter() - start)
            times[name][1].append(time.process_time() - start_cpu)
    out = {}
    for name, (wall, cpu) in times.items():
        out[name] = {"n": len(wall)}
        for prefix, t in (("", wall), ("cpu_", cpu)):
            ms = np.array(t) * 1000
            out[name].update({f"{prefix}p50_ms": float(np.percentile(ms, 50)),
                              f"{prefix}p95_ms": float(np.percentile(ms, 95))})
    return out


def peak_throughput(size: int = 1024, rows: int = 512, repeats: int = 5) -> dict:
    """GFLOP/s of a float32 matmul, GOP/s of torch's int8 dynamic linear and of ``torch._int_mm`` (best of
    ``repeats``), per process-CPU second (as the docs per CPU-second they are compared with); a multiply-add
    counts 2."""
    import warnings

    def best(fn, ops: float) -> float:
        fn()
        times = []
        for _ in range(repeats):
            start = time.process_time()
            fn()
            times.append(time.process_time() - start)
        return ops / max(min(times), 1e-9) / 1e9

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(size, size, generator=g), torch.randn(size, size, generator=g)
    x = torch.randn(rows, size, generator=g)
    out = {"fp32_matmul_gflops": best(lambda: torch.matmul(a, b), 2.0 * size**3), "matmul_size": size,
           "int8_rows": rows}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from lens.quantize import Int8Linear

        lin = Int8Linear(b, None, outliers=0)
    out["int8_linear_gops"] = best(lambda: lin(x), 2.0 * rows * size * size)
    if hasattr(torch, "_int_mm"):
        xi = torch.randint(-64, 64, (rows, size), dtype=torch.int8, generator=g)
        wi = torch.randint(-64, 64, (size, size), dtype=torch.int8, generator=g)
        try:
            out["int_mm_gops"] = best(lambda: torch._int_mm(xi, wi), 2.0 * rows * size * size)
        except RuntimeError:
            out["int_mm_gops"] = None
    return out


def time_cluster_vocab(model: str, k: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "lens.cli", "cluster-vocab", "--model", model, "--clusters", str(k),
               "--out", str(Path(tmp) / "out")]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start


def main() -> None:
    from lens.cmdline import command_line

    ap = Parser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default", help="LENS directory or 'default'")
    ap.add_argument("--backbone-ref", default="default", help="backbone for the cluster-vocab timing")
    ap.add_argument("--docs", type=int, default=32)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--batch-sizes", default="1,4,16,32")
    ap.add_argument("--repeats", type=int, default=2, help="take the best of this many (interleaved)")
    ap.add_argument("--max-length", type=int, default=None,
                    help="override the model's max_seq_length (e.g. 512: longer texts, more padding)")
    ap.add_argument("--clusters", type=int, default=4000)
    ap.add_argument("--skip-cluster-vocab", action="store_true")
    ap.add_argument("--skip-int8", action="store_true")
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: torch's choice); 1 is steadier when other jobs share the CPU")
    ap.add_argument("--out", type=Path, default=RESULTS / "speed_encode.json")
    ap.add_argument("--markdown-only", action="store_true",
                    help="measure nothing: rewrite --out's .md from its saved .json (after a change of the table)")
    args = ap.parse_args()
    if args.markdown_only:
        saved = output_file(args.out, ".json")
        if not saved.is_file():
            ap.error(f"--markdown-only renders {saved}, which does not exist: run the benchmark with --out first")
        write_markdown(output_file(args.out, ".md"), _markdown(json.loads(saved.read_text())))
        return

    from lens.encoder import LensEncoder
    from lens.inputs import encode_texts

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_start = _loadavg()
    encoders = {"fp32": LensEncoder.from_pretrained(args.model, device="cpu")}
    if not args.skip_int8:
        encoders["int8"] = LensEncoder.from_pretrained(args.model, device="cpu", quantize="int8")
    for enc in encoders.values():
        enc.max_seq_length = args.max_length or enc.max_seq_length
    fp32 = encoders["fp32"]
    minilm = None if args.skip_minilm else _minilm()
    texts, queries, source = load_texts(args.docs, args.queries)
    lengths = [len(it.ids) for it in encode_texts(fp32.tokenizer, texts, fp32.max_seq_length)]
    prompt = fp32.config.query_template.format(instruction=fp32.config.default_instruction)
    q_lengths = [len(it.ids) for it in encode_texts(fp32.tokenizer, queries, fp32.max_seq_length, prompt)]
    config = fp32.model.decoder.config
    doc_flops = float(np.mean([backbone_flops(config, n) for n in lengths]))
    peak = peak_throughput()
    for enc in encoders.values():  # warm-up: first calls allocate and pack
        enc.encode(texts[:2], show_progress_bar=False)
        enc.encode_queries(queries[:1], show_progress_bar=False)
    if minilm is not None:
        minilm.encode(texts[:2], show_progress_bar=False)
    print(f"peak: float32 matmul {peak['fp32_matmul_gflops']:.1f} GFLOP/s, int8 linear {peak['int8_linear_gops']:.1f} "
          f"GOP/s; backbone {doc_flops / 1e9:.1f} GFLOP per document (mean {np.mean(lengths):.0f} tokens)", flush=True)

    rows = []
    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        capped, plain = encoder_batches(fp32, texts, bs), encoder_batches(fp32, texts, bs, capped=False)
        systems = {"bare": lambda: run_bare(fp32, capped)}
        if len(plain) != len(capped):
            systems["bare_uncapped"] = lambda: run_bare(fp32, plain)
        for name, enc in encoders.items():
            systems[f"lens_{name}"] = lambda enc=enc: enc.encode(texts, batch_size=bs, show_progress_bar=False)
        if minilm is not None:
            systems["minilm"] = lambda: minilm.encode(texts, batch_size=bs, show_progress_bar=False)
        timed = time_batch_size(systems, len(texts), args.repeats)
        row = {"batch_size": bs, "forwards": len(capped), "forwards_uncapped": len(plain),
               "padded_tokens": int(sum(b["input_ids"].numel() for b in capped)),
               "padded_tokens_uncapped": int(sum(b["input_ids"].numel() for b in plain)),
               "systems": timed, "loadavg_after": _loadavg()}
        bare = timed["bare"]["docs_per_cpu_s"]
        row["ratio_to_bare_cpu"] = {k: v["docs_per_cpu_s"] / bare for k, v in timed.items() if k.startswith("lens_")}
        # backbone GFLOP per CPU-second over the peak of the arithmetic it runs in (int8's: the int8 linear)
        gflops = {k: timed[k]["docs_per_cpu_s"] * doc_flops / 1e9 for k in ["bare"] + [f"lens_{n}" for n in encoders]}
        row["fraction_of_peak"] = {k: v / peak["int8_linear_gops" if k == "lens_int8" else "fp32_matmul_gflops"]
                                   for k, v in gflops.items()}
        rows.append(row)
        print(f"batch {bs:>3}: " + ", ".join(f"{k} {v['docs_per_s']:.2f} docs/s ({v['docs_per_cpu_s']:.2f}/cpu-s)"
                                               for k, v in timed.items()), flush=True)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    one_query = {name: (lambda q, e=enc: e.encode_queries(q, show_progress_bar=False))
                 for name, enc in encoders.items()}
    if minilm is not None:
        one_query["minilm"] = lambda q: minilm.encode([q], batch_size=1, show_progress_bar=False)
    latency = query_latency(one_query, queries)
    torch.set_num_threads(threads)
    print("queries (1 thread): " + ", ".join(f"{k} p50 {v['p50_ms']:.1f} ms / p95 {v['p95_ms']:.1f} ms (CPU "
                                             f"{v['cpu_p50_ms']:.1f} / {v['cpu_p95_ms']:.1f})"
                                             for k, v in latency.items()), flush=True)

    m = machine(torch=True)
    result = {
        "command": command_line(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": {k: m[k] for k in ("cpu", "cores", "torch_threads", "python", "torch", "quantized_engine")},
        "model": args.model, "num_clusters": fp32.num_clusters, "max_seq_length": fp32.max_seq_length,
        "cpu_batch_tokens": fp32.cpu_batch_tokens,
        "inputs": {"source": source, "docs": len(texts), "tokens_mean": float(np.mean(lengths)),
                   "tokens_max": int(max(lengths)), "queries": len(queries),
                   "query_tokens_mean": float(np.mean(q_lengths))},
        "peak": peak, "backbone_gflop_per_doc": doc_flops / 1e9,
        "encode": rows, "queries": latency, "goal_ratio": 0.90, "loadavg_start": load_start,
    }
    if not args.skip_cluster_vocab:
        t = time_cluster_vocab(args.backbone_ref, args.clusters)
        result["cluster_vocab"] = {"clusters": args.clusters, "seconds": t, "goal_seconds": 60}
        print(f"cluster-vocab k={args.clusters}: {t:.1f}s (whole command)", flush=True)
    write_results(args.out, result, _markdown(result), sort_keys=False)


def backbone_flops(config, tokens: int) -> float:
    """FLOPs of one forward of a Llama-style decoder over ``tokens`` tokens: 2 per multiply-add of every linear
    layer (attention projections and MLP; embeddings are lookups) plus the attention scores and their weighted sum
    (``4 * tokens^2 * heads * head_dim`` per layer, bidirectional: every pair)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    linear_params = layers * (2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
                              + 3 * hidden * config.intermediate_size)
    return 2.0 * linear_params * tokens + layers * 4.0 * tokens * tokens * heads * head_dim


def _minilm():
    try:
        from lens.dense import DenseEncoder

        return DenseEncoder.from_pretrained("minilm", device="cpu")
    except (ImportError, FileNotFoundError) as e:
        print(f"MiniLM reference skipped: {e}", flush=True)
        return None


def _loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def _markdown(r: dict) -> str:
    systems: list[str] = []
    for row in r["encode"]:
        systems += [s for s in row["systems"] if s not in systems]
    lines = [
        "# Encoding speed on CPU: LensEncoder.encode (float32, int8) vs the bare backbone forward", "",
        f"Command: `{r['command']}`  ", f"Date: {r['date']}; machine: {r['machine']['cpu']}, "
        f"{r['machine']['cores']} cores, torch {r['machine']['torch']} ({r['machine']['torch_threads']} threads, "
        f"quantized engine {r['machine']['quantized_engine']})  ",
        f"Inputs: {r['inputs']['docs']} texts from {r['inputs']['source']}, mean {r['inputs']['tokens_mean']:.0f} "
        f"tokens (max {r['inputs']['tokens_max']}); model {r['model']}, k={r['num_clusters']}, max_seq_length "
        f"{r['max_seq_length']}, CPU batches capped at {r['cpu_batch_tokens']} padded tokens", "",
        f"Peak per CPU-second: float32 matmul {r['peak']['fp32_matmul_gflops']:.1f} GFLOP/s, int8 dynamic linear "
        f"{r['peak']['int8_linear_gops']:.1f} GOP/s"
        + (f", torch._int_mm {r['peak']['int_mm_gops']:.1f} GOP/s" if r["peak"].get("int_mm_gops") else "")
        + f"; backbone {r['backbone_gflop_per_doc']:.1f} GFLOP per document.", "",
        "Each batch size's systems are timed back to back, the order rotating by repeat; best repeat. Cells: docs/s "
        "wall (docs per CPU-second). bare = the float32 decoder alone on the encoder's batches; bare_uncapped = on "
        "plain batch_size-row batches (the encoder before the token cap). Load average at start and after each row: "
        f"{r['loadavg_start']} -> {[row['loadavg_after'] for row in r['encode']]}", "",
        "| batch size | " + " | ".join(systems) + " | LENS fp32 / bare (CPU) | LENS int8 / bare (CPU) | "
        "LENS int8 / fp32: wall (CPU) | fraction of peak (CPU): bare, fp32, int8 |",
        "|---:|" + "---:|" * (len(systems) + 4),
    ]
    for row in r["encode"]:
        cells = [f"{row['systems'][s]['docs_per_s']:.2f} ({row['systems'][s]['docs_per_cpu_s']:.2f})"
                 if s in row["systems"] else "" for s in systems]
        ratios = [f"{row['ratio_to_bare_cpu'][k]:.3f}" if k in row["ratio_to_bare_cpu"] else ""
                  for k in ("lens_fp32", "lens_int8")]
        got = row["systems"]
        ratios.append(f"{got['lens_int8']['docs_per_s'] / got['lens_fp32']['docs_per_s']:.2f} "
                      f"({got['lens_int8']['docs_per_cpu_s'] / got['lens_fp32']['docs_per_cpu_s']:.2f})"
                      if "lens_int8" in got and "lens_fp32" in got else "")
        frac = ", ".join(f"{v:.2f}" for v in row["fraction_of_peak"].values())
        lines.append(f"| {row['batch_size']} | " + " | ".join(cells + ratios) + f" | {frac} |")
    lines += ["", f"Queries, one at a time at 1 thread ({r['inputs']['queries']} queries, mean "
                  f"{r['inputs']['query_tokens_mean']:.0f} tokens with the instruction):", "",
              "| system | p50 ms | p95 ms | CPU p50 ms | CPU p95 ms |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {k} | {v['p50_ms']:.1f} | {v['p95_ms']:.1f} | {v['cpu_p50_ms']:.1f} | {v['cpu_p95_ms']:.1f} |"
              for k, v in r["queries"].items()]
    if "cluster_vocab" in r:
        cv = r["cluster_vocab"]
        lines += ["", f"`lens cluster-vocab --clusters {cv['clusters']}` on the default backbone, whole command: "
                      f"**{cv['seconds']:.1f} s** (goal <= {cv['goal_seconds']} s)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
