"""GPU encoding speed (issue 42): LensEncoder.encode against the bare backbone forward in the same run, float32 and
bfloat16, per batch size, on real documents of three lengths, and query latency; one table.

Documents (``--docs`` of each set, from ``_common.data_dir()``): Cranfield (short), SciFact abstracts (as the model
takes them: cut at its ``max_seq_length``), and SciFact abstracts of at least ``--cut`` tokens cut to exactly
``--cut`` (256: the issue's goal length). Without the shared data, pydoc passages stand in (and say so). Per dtype,
set and batch size (doubling until one runs out of CUDA memory: the row records it and larger ones are skipped):

- bare: the decoder alone (``LensModel.hidden_states``) on the encoder's own batches, pre-tokenised, pre-padded and
  already on the device: what the backbone costs;
- lens: the whole public call ``encode(texts, batch_size=B)`` (tokenise, sort by length into batches, copy, forward,
  cluster head, float32 pooling, normalise, back to the CPU); lens / bare is the encoder's overhead;
- "auto": the batch size ``encode`` picks itself on this device (``LensEncoder.default_batch_size``).

docs/s are the best of ``--repeats`` (systems interleaved, order rotating); the share of the bfloat16 ceiling is
docs/s x 2 x P x T / (``--peak-tflops`` x 10^12), with P the parameters a token is multiplied by (decoder without
its embedding table, plus the cluster head) and T the set's mean real tokens (attention's T^2 work, ~8% at 256
tokens, is not counted: the ceiling is a little high). Peak GPU memory is ``torch.cuda.max_memory_allocated``.
Then, at the auto batch size in bfloat16: the SDPA backends forced one by one (``torch.nn.attention.sdpa_kernel``:
flash, memory-efficient, math), and the corpus in 128-document chunks in corpus order (the benchmark harness's
cache, ``lens bench beir``) against one length-sorted call.

Queries (SciFact's, behind the model's instruction): one at a time (p50 / p95 ms), 32 as one batch (the batch's
latency and queries/s), and 32 client threads each sending single queries (latency and queries/s); and the
fixed-shape path: a query padded to a fixed length bucket, then eager, ``torch.compile`` (``--compile``) and a
captured CUDA graph (``--cuda-graphs``); each failure is recorded, none is fatal, and each variant's vectors are
compared with ``encode_queries``'s.

nDCG@10 of bfloat16 against float32 is measured apart, by the harness (two runs, each precision cached apart)::

    lens bench beir scifact cranfield medline --systems lens-lexicon --device cuda --dtype float32 \\
        --output-dir runs/beir-float32
    lens bench beir scifact cranfield medline --systems lens-lexicon --device cuda --dtype bfloat16 \\
        --output-dir runs/beir-bfloat16

    python benchmarks/speed_gpu.py --compile --cuda-graphs           # on a GPU (benchmarks/gpu_session.sh runs it)
    python benchmarks/speed_gpu.py --device cpu --smoke --output /tmp/speed_gpu   # the script itself, no GPU
"""

from __future__ import annotations

import argparse
import sys
import contextlib
import itertools
import logging
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from _common import RESULTS, add_data_dir_argument, data_dir, finish, machine, start
from lens.cli_args import Parser

logger = logging.getLogger("speed_gpu")

NAME = "speed_gpu"
DEFAULT_PEAK_TFLOPS = 989.0
PEAK_SOURCE = ("NVIDIA's published dense BF16 Tensor Core peak of the H100 SXM and of the H200: 989 TFLOP/s "
               "(1,979 with 2:4 sparsity; H100 PCIe: 756); a datasheet figure, not measured here")
SETS = ("cranfield", "scifact", "cut")
KERNELS = ("flash", "efficient", "math")
CHUNK = 128  # the harness's LENS cache chunk (lens.eval.systems.LensResource)


# ---------------------------------------------------------------------------------------------- inputs
def read_texts(root: Path, n_docs: int, n_queries: int) -> tuple[dict[str, list[str]], list[str], str]:
    """({"cranfield", "scifact", "long"}: texts, queries, source): "long" is every SciFact abstract, from which the
    cut set is chosen. Pydoc passages (and their first sentences as queries) when the shared data is missing."""
    from lens.corpus import iter_corpus, load_queries, pydoc_passages

    scifact, cranfield = root / "beir" / "scifact", root / "classic" / "cranfield"
    if all(any((d / f).is_file() for f in ("corpus.jsonl.gz", "corpus.jsonl")) for d in (scifact, cranfield)):
        sci = [d.full_text for d in iter_corpus(scifact)]
        cran = [d.full_text for d in itertools.islice(iter_corpus(cranfield), n_docs)]
        queries = list(load_queries(scifact).values())[:n_queries]
        return {"cranfield": cran, "scifact": sci[:n_docs], "long": sci}, queries, str(root)
    passages = [d.full_text for d in pydoc_passages()]
    short = [p[:160] for p in passages[:n_docs]]
    return ({"cranfield": short, "scifact": passages[:n_docs], "long": passages},
            [p.split(".")[0][:120] for p in passages[:n_queries]], "pydoc_data.topics (no shared data found)")


def cut_texts(tokenizer, texts: list[str], n: int, cut: int) -> tuple[list[str], int]:
    """The first ``n`` texts of at least ``cut`` tokens (the longest ones when too few are), and how many were that
    long: encoded with ``max_seq_length = cut`` every one is cut to the same length."""
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    long_enough = [t for t, n_tok in zip(texts, lengths) if n_tok >= cut]
    if len(long_enough) >= n:
        return long_enough[:n], n
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    return [texts[i] for i in order[:n]], len(long_enough)


def token_lengths(encoder, texts: list[str], prompt: str | None = None) -> list[int]:
    from lens.inputs import encode_texts

    return [len(it.ids) for it in encode_texts(encoder.tokenizer, texts, encoder.max_seq_length, prompt,
                                               normalization=encoder.config.text_normalization,
                                               convention=encoder.config.convention)]


def matmul_params(encoder) -> int:
    """Parameters each token is multiplied by: the decoder's without its embedding table (a lookup), plus the
    cluster head."""
    decoder = encoder.model.decoder
    embedding = decoder.get_input_embeddings().weight.numel()
    return sum(p.numel() for p in decoder.parameters()) - embedding + encoder.model.head.weight.numel()


# ---------------------------------------------------------------------------------------------- timing
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def is_oom(error: BaseException) -> bool:
    """A CUDA (or any torch) out-of-memory error."""
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


def describe(error: BaseException) -> str:
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first[:300]}"


def interleaved(systems: dict[str, Callable[[], object]], repeats: int, device: torch.device) -> dict[str, list]:
    """Each system's wall seconds per repeat, the order of systems rotating by repeat."""
    names = list(systems)
    times: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(repeats):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            sync(device)
            t0 = time.perf_counter()
            systems[name]()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return times


def encoder_batches(encoder, texts: list[str], batch_size: int, device: torch.device) -> list[dict]:
    """The encoder's own padded batches of ``texts`` (length-sorted, as ``encode`` makes them), on ``device``."""
    from lens.inputs import PADDING_SIDE, encode_texts, length_sorted_batches, pad_batch

    items = encode_texts(encoder.tokenizer, texts, encoder.max_seq_length,
                         normalization=encoder.config.text_normalization, convention=encoder.config.convention)
    cap = encoder.cpu_batch_tokens if device.type == "cpu" else None
    side = PADDING_SIDE[encoder.config.convention]
    return [{k: v.to(device) for k, v in pad_batch([items[j] for j in rows], encoder.tokenizer.pad_token_id,
                                                    side=side).items()}
            for rows in length_sorted_batches([len(it.ids) for it in items], batch_size, cap)]


def run_bare(encoder, batches: list[dict]) -> None:
    """The decoder alone: no tokenisation, no copy, no head, no pooling."""
    with torch.inference_mode():
        for b in batches:
            encoder.model.hidden_states(b["input_ids"], b["attention_mask"])


def sdpa_backend(kernel: str | None):
    """A context forcing one SDPA backend (None: torch's own choice)."""
    if kernel is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                        "math": SDPBackend.MATH}[kernel])


def measure_encode(encoder, texts: list[str], batch_size: int, repeats: int, device: torch.device,
                   kernel: str | None = None, bare: bool = True) -> dict:
    """bare and lens docs/s at ``batch_size`` (best repeat), peak memory; raises what the forward raises."""
    with sdpa_backend(kernel):
        batches = encoder_batches(encoder, texts, batch_size, device) if bare else []
        systems = {"lens": lambda: encoder.encode(texts, batch_size=batch_size, show_progress_bar=False)}
        if bare:
            systems = {"bare": lambda: run_bare(encoder, batches), **systems}
        encoder.encode(texts[:batch_size], batch_size=batch_size, show_progress_bar=False)  # warm-up at this shape
        if bare:
            run_bare(encoder, batches[:1])
        sync(device)
        reset_peak(device)
        times = interleaved(systems, repeats, device)
    out = {name: {"docs_per_s": len(texts) / min(t), "wall_s": t} for name, t in times.items()}
    out["forwards"] = len(batches) if bare else None
    out["padded_tokens"] = int(sum(b["input_ids"].numel() for b in batches)) if bare else None
    out["peak_gib"] = peak_gib(device)
    return out


def free_memory(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- queries
def percentiles(seconds: list[float]) -> dict:
    ms = np.asarray(seconds) * 1000.0
    return {"n": len(seconds), "p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95))}


def query_latency(encoder, queries: list[str], concurrency: int) -> dict:
    """One query at a time; ``concurrency`` queries as one batch; ``concurrency`` client threads each sending its
    share of the queries one at a time (latency of each call, queries/s over the whole)."""
    def one(q: str):
        return encoder.encode_queries([q], batch_size=1, show_progress_bar=False)

    def one_at_a_time() -> dict:
        one(queries[0])
        seconds = []
        for q in queries:
            t0 = time.perf_counter()
            one(q)
            seconds.append(time.perf_counter() - t0)
        return percentiles(seconds)

    out = {"one": one_at_a_time()}  # the encoder as it comes: on CUDA, single queries replay CUDA graphs
    if encoder.cuda_graphs:
        encoder.cuda_graphs = False  # the batch path for one query, as before lens.fixed_shape
        try:
            out["one_no_graphs"] = one_at_a_time()
        finally:
            encoder.cuda_graphs = True

    width = min(concurrency, len(queries))
    groups = [list(itertools.islice(itertools.cycle(queries), s, s + width)) for s in range(0, max(5, len(queries)
                                                                                              // width) * width, width)]
    encoder.encode_queries(groups[0], batch_size=width, show_progress_bar=False)
    batch = []
    for g in groups:
        t0 = time.perf_counter()
        encoder.encode_queries(g, batch_size=width, show_progress_bar=False)
        batch.append(time.perf_counter() - t0)
    out["batch"] = {**percentiles(batch), "size": width, "queries_per_s": width * len(batch) / sum(batch)}

    clients = min(concurrency, len(queries))
    shares = [queries[c::clients] for c in range(clients)]
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(share: list[str]) -> None:
        mine = []
        try:
            for q in share:
                t0 = time.perf_counter()
                one(q)
                mine.append(time.perf_counter() - t0)
        except Exception as e:  # recorded: a thread-safety failure is a finding, not a crash
            with lock:
                errors.append(describe(e))
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(s,)) for s in shares]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    out["threads"] = {**(percentiles(latencies) if latencies else {"n": 0}), "clients": clients,
                      "queries_per_s": len(latencies) / wall if wall > 0 else None, "errors": errors[:3]}
    return out


class FixedQueryPath:
    """A query padded to ``length`` tokens in one fixed-shape batch of one (``lens.fixed_shape``, the path ``encode``
    takes for one text on CUDA), through the model as is ("eager"), ``torch.compile``d ("compile") or replayed from a
    captured CUDA graph ("cudagraph"); text in, unit lexicon vector (numpy) out."""

    def __init__(self, encoder, length: int, mode: str):
        from lens.fixed_shape import FixedShapeForward
        from lens.inputs import PADDING_SIDE

        if mode not in ("eager", "compile", "cudagraph"):
            raise ValueError(f"unknown mode {mode!r}")
        self.encoder, self.length, self.mode = encoder, length, mode
        self.prompt = encoder.config.query_template.format(instruction=encoder.config.default_instruction)
        model = torch.compile(encoder.model, dynamic=False) if mode == "compile" else encoder.model
        self.path = FixedShapeForward(model, encoder.tokenizer.pad_token_id, PADDING_SIDE[encoder.config.convention],
                                      (length,), mode="cudagraph" if mode == "cudagraph" else "eager")

    def __call__(self, text: str) -> np.ndarray:
        from lens.inputs import encode_texts

        enc = self.encoder
        item = encode_texts(enc.tokenizer, [text], min(self.length, enc.max_seq_length), self.prompt,
                            normalization=enc.config.text_normalization, convention=enc.config.convention)[0]
        row = self.path(item)
        if row is None:
            raise RuntimeError(f"the fixed-shape {self.mode} path turned itself off ({self.path.off_reason})")
        return row[0] / max(float(np.linalg.norm(row[0])), 1e-12)


def fixed_path(encoder, queries: list[str], length: int, modes: list[str]) -> dict:
    """Latency (p50 / p95 ms) of each fixed-shape variant, one query at a time, and the largest difference of its
    vectors from ``encode_queries``'s; a variant that fails records its error."""
    want = encoder.encode_queries(queries, show_progress_bar=False)
    out = {"length": length}
    for mode in modes:
        try:
            t0 = time.perf_counter()
            path = FixedQueryPath(encoder, length, mode)
            got = np.stack([path(q) for q in queries[:3]])  # warm-up (compilation happens here)
            setup = time.perf_counter() - t0
            seconds = []
            for q in queries:
                t0 = time.perf_counter()
                path(q)
                seconds.append(time.perf_counter() - t0)
            got = np.stack([path(q) for q in queries])
            out[mode] = {**percentiles(seconds), "setup_s": setup,
                         "max_abs_diff": float(np.abs(got - want).max())}
        except Exception as e:  # a flag's failure is recorded and the run goes on
            logger.warning("fixed-shape query path %s failed: %s", mode, describe(e))
            out[mode] = {"error": describe(e)}
    return out


# ---------------------------------------------------------------------------------------------- the run
def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch sizes are comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive, got {text!r}")
    return sorted(set(sizes))


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default", help="LENS directory or 'default'")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (with --smoke: the script "
                                                     "itself, without a GPU)")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated torch dtypes to compare")
    add_data_dir_argument(ap)
    ap.add_argument("--docs", type=int, default=1024, help="documents per set")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--cut", type=int, default=256, help="the cut set's length in tokens")
    ap.add_argument("--batch-sizes", type=parse_sizes, default=parse_sizes("16,32,64,128,256,512,1024"),
                    help="bfloat16 (and other half-precision) batch sizes, smallest first; larger ones are skipped "
                         "after an out-of-memory error")
    ap.add_argument("--fp32-batch-sizes", type=parse_sizes, default=parse_sizes("64,256"),
                    help="float32 batch sizes (a few: the reference, not the goal)")
    ap.add_argument("--repeats", type=int, default=2, help="best of this many, systems interleaved")
    ap.add_argument("--concurrency", type=int, default=32, help="queries in one batch, and client threads")
    ap.add_argument("--query-bucket", type=int, default=64, help="the fixed-shape query path's length in tokens")
    ap.add_argument("--compile", action="store_true", help="also torch.compile the fixed-shape query path")
    ap.add_argument("--cuda-graphs", action="store_true", help="also replay the fixed-shape query path from a "
                                                               "captured CUDA graph")
    ap.add_argument("--peak-tflops", type=float, default=DEFAULT_PEAK_TFLOPS,
                    help=f"dense bf16 peak of the GPU for the ceiling (default {DEFAULT_PEAK_TFLOPS:g}: {PEAK_SOURCE})")
    ap.add_argument("--peak-source", default=None, help="where --peak-tflops comes from, for the table (default: "
                                                         "the H100/H200 datasheet figure when it is 989)")
    ap.add_argument("--time-budget", type=float, default=480.0, metavar="SECONDS",
                    help="skip what is left (recorded) once the run has taken this long")
    ap.add_argument("--smoke", action="store_true",
                    help="a few texts, batch sizes 1 and 4, one repeat: checks the script, measures nothing")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = start(build_parser(), argv, NAME, render)
    if args is None:
        return 0
    tmp = None
    if args.smoke:
        if Path(args.output).resolve() == (RESULTS / NAME).resolve():  # never over the committed GPU measurements
            import tempfile

            args.output = Path(tempfile.mkdtemp(prefix="speed-gpu-smoke-out-")) / NAME
            print(f"speed_gpu.py --smoke: writing to {args.output} (the committed results stay as they are; "
                  "--output chooses the place)", file=sys.stderr)
        args.docs, args.queries, args.repeats = min(args.docs, 8), min(args.queries, 6), 1
        args.batch_sizes, args.fp32_batch_sizes = [1, 4], [4]
        args.query_bucket = min(args.query_bucket, 48)
        if args.model == "default":  # the real model on a CPU takes minutes: a tiny random one checks the code
            import tempfile

            tmp = tempfile.TemporaryDirectory(prefix="speed-gpu-smoke-")
            args.model = str(tiny_model(Path(tmp.name)))
    try:
        return _run(args)
    finally:
        if tmp is not None:
            tmp.cleanup()


def tiny_model(directory: Path) -> Path:
    """A LENS directory on ``lens.testing``'s tiny random decoder (k=16), for ``--smoke``."""
    from lens.testing import save_tiny_backbone
    from lens.vocab import cluster_vocab

    backbone = save_tiny_backbone(directory / "backbone")
    cluster_vocab(directory / "tiny-k16", str(backbone), 16)
    return directory / "tiny-k16"


def _run(args: argparse.Namespace) -> int:
    from lens.encoder import count_truncations
    from lens.sharding import check_devices

    try:
        device = torch.device(check_devices([args.device])[0])
    except ValueError as e:
        raise SystemExit(f"speed_gpu.py: {e}; without a GPU, check the script with --device cpu --smoke") from None
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if not isinstance(getattr(torch, d, None), torch.dtype):
            raise SystemExit(f"--dtypes: {d!r} is not a torch dtype (e.g. float32, bfloat16)")
    began = time.perf_counter()
    failures: list[str] = []

    def out_of_time(what: str) -> bool:
        if time.perf_counter() - began > args.time_budget:
            failures.append(f"skipped {what}: past --time-budget {args.time_budget:g} s")
            return True
        return False

    with count_truncations() as cut_count:  # long texts are cut on purpose here: counted, not warned per call
        result = _measure(args, device, dtypes, began, failures, out_of_time)
    result["truncated_texts"] = cut_count.truncated
    result["seconds"] = time.perf_counter() - began
    return finish(args, result, render, smoke=args.smoke)


def _measure(args: argparse.Namespace, device: torch.device, dtypes: list[str], began: float, failures: list[str],
             out_of_time: Callable[[str], bool]) -> dict:
    """Every measurement of the run, in one result dict (``main`` writes it)."""
    from lens.encoder import LensEncoder

    texts, queries, source = read_texts(data_dir(args.data_dir), args.docs, args.queries)
    result: dict = {"device": str(device), "model": args.model, "peak_tflops": args.peak_tflops,
                    "peak_source": args.peak_source or (PEAK_SOURCE if args.peak_tflops == DEFAULT_PEAK_TFLOPS
                                                        else "given with --peak-tflops"),
                    "smoke": args.smoke, "inputs": {"source": source}, "encode": [], "kernels": [], "chunked": [],
                    "queries": {}, "fixed_path": {}, "failures": failures}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        result["gpu"] = {"name": props.name, "memory_gib": props.total_memory / 2**30,
                         "cuda": torch.version.cuda, "capability": f"{props.major}.{props.minor}"}
    m = machine(torch=True)
    result["machine"] = {k: m[k] for k in ("cpu", "cores", "python", "torch")}
    try:
        import transformers

        result["machine"]["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover - a dependency
        pass

    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        free_memory(device)
        t0 = time.perf_counter()
        encoder = LensEncoder.from_pretrained(args.model, device=str(device), dtype=dtype)
        logger.info("loaded %s in %s on %s in %.1f s", args.model, dtype_name, device, time.perf_counter() - t0)
        model_max = encoder.max_seq_length
        cut, n_long = cut_texts(encoder.tokenizer, texts["long"], args.docs, args.cut)
        sets = {"cranfield": texts["cranfield"], "scifact": texts["scifact"], "cut": cut}
        params = matmul_params(encoder)
        result.setdefault("params", {"matmul": params, "num_clusters": encoder.num_clusters,
                                     "max_seq_length": model_max, "cut": args.cut,
                                     "pooling_upcast": {}})
        result["params"]["pooling_upcast"][dtype_name] = bool(encoder.model.upcast_logits)
        sizes = args.fp32_batch_sizes if dtype == torch.float32 else args.batch_sizes
        for name, docs in sets.items():
            encoder.max_seq_length = args.cut if name == "cut" else model_max
            lengths = token_lengths(encoder, docs)
            info = result["inputs"].setdefault(name, {
                "docs": len(docs), "tokens_mean": float(np.mean(lengths)), "tokens_max": int(max(lengths)),
                "max_seq_length": encoder.max_seq_length,
                "ceiling_docs_per_s": args.peak_tflops * 1e12 / (2.0 * params * float(np.mean(lengths)))})
            if name == "cut":
                info["long_enough"] = n_long
            auto = encoder.default_batch_size(max(lengths))
            info.setdefault("auto_batch_size", {})[dtype_name] = auto
            for bs in sorted(set(sizes) | {auto}):
                if bs > len(docs) and bs != auto:
                    failures.append(f"skipped {dtype_name} {name} batch {bs}: more than the set's {len(docs)} "
                                    "documents (raise --docs)")
                    break
                if out_of_time(f"{dtype_name} {name} batch {bs}"):
                    break
                row = {"dtype": dtype_name, "set": name, "batch_size": bs, "auto": bs == auto}
                try:
                    row.update(measure_encode(encoder, docs, bs, args.repeats, device))
                    row["lens_over_bare"] = row["lens"]["docs_per_s"] / row["bare"]["docs_per_s"]
                    row["ceiling_share"] = {k: row[k]["docs_per_s"] / info["ceiling_docs_per_s"]
                                            for k in ("bare", "lens")}
                except Exception as e:  # noqa: BLE001 - every failure is a result of this run
                    row["error"] = describe(e)
                    row["oom"] = is_oom(e)
                    free_memory(device)
                    result["encode"].append(row)
                    logger.warning("%s %s batch %d: %s", dtype_name, name, bs, row["error"])
                    if row["oom"]:
                        break  # larger batches need more memory still
                    continue
                result["encode"].append(row)
                logger.info("%s %-9s batch %4d: bare %8.1f docs/s, lens %8.1f docs/s (%.2f), peak %s GiB",
                            dtype_name, name, bs, row["bare"]["docs_per_s"], row["lens"]["docs_per_s"],
                            row["lens_over_bare"], f"{row['peak_gib']:.2f}" if row["peak_gib"] else "-")
            if dtype != torch.float32 and not out_of_time(f"{dtype_name} {name} kernels"):
                for kernel in KERNELS:
                    entry = {"dtype": dtype_name, "set": name, "batch_size": auto, "kernel": kernel}
                    try:
                        got = measure_encode(encoder, docs, auto, args.repeats, device, kernel=kernel)
                        entry.update(bare=got["bare"]["docs_per_s"], lens=got["lens"]["docs_per_s"])
                    except Exception as e:  # noqa: BLE001 - a backend that cannot run these inputs is a finding
                        entry["error"] = describe(e)
                        free_memory(device)
                    result["kernels"].append(entry)
                chunked = {"dtype": dtype_name, "set": name, "batch_size": auto, "chunk": CHUNK}
                try:
                    t0 = time.perf_counter()
                    for s in range(0, len(docs), CHUNK):
                        encoder.encode(docs[s: s + CHUNK], batch_size=auto, show_progress_bar=False)
                    chunked["chunked_docs_per_s"] = len(docs) / (time.perf_counter() - t0)
                    sorted_row = next((r for r in result["encode"] if r["dtype"] == dtype_name and r["set"] == name
                                       and r["batch_size"] == auto and "lens" in r), None)
                    chunked["sorted_docs_per_s"] = sorted_row["lens"]["docs_per_s"] if sorted_row else None
                except Exception as e:  # noqa: BLE001
                    chunked["error"] = describe(e)
                result["chunked"].append(chunked)
        encoder.max_seq_length = model_max
        prompt = encoder.config.query_template.format(instruction=encoder.config.default_instruction)
        result["inputs"].setdefault("queries", {"n": len(queries),
                                                "tokens_mean": float(np.mean(token_lengths(encoder, queries, prompt)))})
        if not out_of_time(f"{dtype_name} queries"):
            try:
                result["queries"][dtype_name] = query_latency(encoder, queries, args.concurrency)
            except Exception as e:  # noqa: BLE001
                result["queries"][dtype_name] = {"error": describe(e)}
        modes = ["eager"] + (["compile"] if args.compile else []) + (["cudagraph"] if args.cuda_graphs else [])
        if dtype != torch.float32:
            if not out_of_time(f"{dtype_name} fixed-shape queries"):
                result["fixed_path"][dtype_name] = fixed_path(encoder, queries, args.query_bucket, modes)
        del encoder
    return result


# ---------------------------------------------------------------------------------------------- the table
def _f(x, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def render(r: dict) -> list[str]:
    """The Markdown of a result: encode table, SDPA backends, chunked vs sorted, queries, failures."""
    gpu = r.get("gpu")
    where = (f"{gpu['name']} ({gpu['memory_gib']:.0f} GiB, CUDA {gpu['cuda']})" if gpu else f"{r['device']}, no GPU")
    m = r.get("machine", {})
    meta = r.get("_meta", {})
    inputs = r["inputs"]
    lines = ["# GPU encoding speed: LensEncoder.encode vs the bare backbone forward, float32 and bfloat16", ""]
    if r.get("smoke"):
        lines += ["**Smoke run (`--smoke`): a check of the script on a few texts; these numbers measure nothing.**", ""]
    lines += [f"Command: `{meta.get('command', '?')}`  ",
              f"Device: {where}; {m.get('cpu', '?')}, {m.get('cores', '?')} cores; torch {m.get('torch', '?')}, "
              f"transformers {m.get('transformers', '?')}; model {r['model']}  ",
              f"Inputs: {inputs['source']}; run took {_f(r.get('seconds'), '.0f')} s", ""]
    p = r.get("params")
    if p:
        lines += [f"Ceiling: {r['peak_tflops']:g} TFLOP/s ({r['peak_source']}) / (2 x {p['matmul'] / 1e6:.1f}M "
                  "parameters a token is multiplied by (decoder without its embedding table, plus the "
                  f"{p['num_clusters']}-cluster head) x the set's mean tokens); attention's T^2 work is not counted. "
                  f"Pooling in float32: {p['pooling_upcast']}.", ""]
    lines += ["| set | docs | mean tokens (max) | ceiling docs/s | auto batch |", "|---|---:|---:|---:|---|"]
    for name in SETS:
        if name in inputs:
            s = inputs[name]
            label = f"cut to {s['max_seq_length']} tokens" if name == "cut" else name
            auto = ", ".join(f"{k} {v}" for k, v in s.get("auto_batch_size", {}).items())
            lines.append(f"| {label} | {s['docs']} | {s['tokens_mean']:.0f} ({s['tokens_max']}) | "
                         f"{s['ceiling_docs_per_s']:,.0f} | {auto} |")
    lines += ["", "docs/s, best of the repeats; bare = the decoder alone on the encoder's batches (pre-tokenised, "
                  "on the device); lens = the whole `encode` call; * = the batch size `encode` picks itself here.",
              "", "| dtype | set | batch | bare docs/s | LENS docs/s | LENS / bare | % of bf16 ceiling (bare, LENS) "
                  "| peak GPU GiB |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in r["encode"]:
        bs = f"{row['batch_size']}{'*' if row.get('auto') else ''}"
        if "error" in row:
            what = "out of memory" if row.get("oom") else row["error"]
            lines.append(f"| {row['dtype']} | {row['set']} | {bs} | {what} | | | | |")
            continue
        share = row["ceiling_share"]
        lines.append(f"| {row['dtype']} | {row['set']} | {bs} | {row['bare']['docs_per_s']:,.1f} | "
                     f"{row['lens']['docs_per_s']:,.1f} | {row['lens_over_bare']:.2f} | "
                     f"{100 * share['bare']:.1f}, {100 * share['lens']:.1f} | {_f(row['peak_gib'], '.2f')} |")
    if r["kernels"]:
        lines += ["", "SDPA backend forced (`torch.nn.attention.sdpa_kernel`) at the auto batch size; the rows "
                      "above use torch's own choice:", "",
                  "| dtype | set | batch | backend | bare docs/s | LENS docs/s |", "|---|---|---:|---|---:|---:|"]
        for k in r["kernels"]:
            cells = (f"{k['bare']:,.1f} | {k['lens']:,.1f}" if "error" not in k else f"failed: {k['error']} |")
            lines.append(f"| {k['dtype']} | {k['set']} | {k['batch_size']} | {k['kernel']} | {cells} |")
    if r["chunked"]:
        lines += ["", f"Corpus order in chunks of {CHUNK} (the harness's cache) against one length-sorted call:", "",
                  "| dtype | set | batch | sorted docs/s | chunked docs/s |", "|---|---|---:|---:|---:|"]
        for c in r["chunked"]:
            got = (f"{_f(c.get('sorted_docs_per_s'), ',.1f')} | {c['chunked_docs_per_s']:,.1f}" if "error" not in c
                   else f"failed: {c['error']} |")
            lines.append(f"| {c['dtype']} | {c['set']} | {c['batch_size']} | {got} |")
    if r["queries"]:
        q = inputs.get("queries", {})
        lines += ["", f"Queries ({q.get('n', '?')}, mean {_f(q.get('tokens_mean'), '.0f')} tokens with the "
                      "instruction), wall ms:", "",
                  "| dtype | one at a time p50 / p95 | one at a time, `cuda_graphs` off | batch of N: p50 / p95 "
                  "(queries/s) | N client threads: p50 / p95 (queries/s) |", "|---|---:|---:|---:|---:|"]
        for dtype, v in r["queries"].items():
            if "error" in v:
                lines.append(f"| {dtype} | failed: {v['error']} | | | |")
                continue
            b, t = v["batch"], v["threads"]
            threads = (f"{_f(t.get('p50_ms'))} / {_f(t.get('p95_ms'))} ({_f(t.get('queries_per_s'))}), "
                       f"N={t['clients']}" + (f"; errors: {'; '.join(t['errors'])}" if t.get("errors") else ""))
            off = v.get("one_no_graphs")
            off = f"{off['p50_ms']:.1f} / {off['p95_ms']:.1f}" if off else "-"
            lines.append(f"| {dtype} | {v['one']['p50_ms']:.1f} / {v['one']['p95_ms']:.1f} | {off} | "
                         f"{b['p50_ms']:.1f} / "
                         f"{b['p95_ms']:.1f} ({b['queries_per_s']:.0f}), N={b['size']} | {threads} |")
    if r["fixed_path"]:
        lines += ["", "Fixed-shape query path (one query padded to a length bucket), wall ms from text to vector; "
                      "max |diff| against `encode_queries`:", "",
                  "| dtype | bucket | variant | p50 | p95 | setup s | max abs diff |", "|---|---:|---|---:|---:|---:|---:|"]
        for dtype, v in r["fixed_path"].items():
            for mode, got in v.items():
                if mode == "length":
                    continue
                if "error" in got:
                    lines.append(f"| {dtype} | {v['length']} | {mode} | failed: {got['error']} | | | |")
                else:
                    lines.append(f"| {dtype} | {v['length']} | {mode} | {got['p50_ms']:.2f} | {got['p95_ms']:.2f} | "
                                 f"{got['setup_s']:.1f} | {got['max_abs_diff']:.2e} |")
    if r["failures"]:
        lines += ["", "Skipped or failed: " + "; ".join(r["failures"])]
    lines += ["", "nDCG@10 of bfloat16 against float32 is not in this table: `lens bench beir scifact cranfield medline "
                  "--systems lens-lexicon --device cuda --dtype float32|bfloat16` (benchmarks/gpu_session.sh runs both)."]
    notes = meta.get("notes") or []
    if notes:
        lines += ["", *[f"Note: {n}" for n in notes]]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
