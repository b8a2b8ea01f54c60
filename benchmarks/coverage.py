"""Any model in: architectures from `transformers` through `torch.compile(model,
backend=tensortune.backend(...))` in default mode on an empty database, as a new user tries
them, each against torch eager and inductor in the same process.

Every model is built from its config (random weights, seeded before construction, nothing
downloaded), small enough for a 2-core machine, batch 1, under `torch.no_grad()`, and run
alone in a child process with a time limit. Printed per model: the backend's compile time
(the first call) and inductor's, the TVM regions, the share of operators run in TVM and of
eager's time spent in TVM's regions, why the rest runs in PyTorch, the max error against
eager (relative, as `tune-model` checks), and eager's time against the compiled model's, timed in turn.
Then the ten slowest compiles.

With `--tune-model TRIALS`, each model goes through `tensortune tune-model` instead (each
model here is a factory, `benchmarks/coverage.py:llama`; a model TVM takes in part is split),
at that budget, and its summary's figures are printed.

Run alone on the machine:
    .venv/bin/python benchmarks/coverage.py [--models bert llama ...] [--timeout 600]
        [--tune-model TRIALS] [--out benchmarks/results/coverage.txt]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


THREADS = len(os.sched_getaffinity(0))
WIDTH, LAYERS, HEADS, VOCAB, TOKENS = 128, 2, 4, 1024, 64  # every language model's size
IMAGE = 64  # pixels a side for vision models


def _text(config_class: str, model_class: str, output: str = "last_hidden_state", **config):
    """A factory of a text model from its config: token ids in, `output` out."""
    def make():
        import torch
        import transformers

        made = getattr(transformers, config_class)(**config)
        made._attn_implementation = "eager"  # the attention a graph shows as operators
        model = getattr(transformers, model_class)(made)
        return Output(model, output).eval(), (torch.randint(0, VOCAB, (1, TOKENS)),)
    return make


def _vision(config_class: str, model_class: str, shape=(1, 3, IMAGE, IMAGE), **config):
    """A factory of a vision or audio model from its config: pixels (or samples) in."""
    def make():
        import torch
        import transformers

        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
        return Output(model, "last_hidden_state").eval(), (torch.randn(*shape),)
    return make


def Output(model, field: str):
    """The model called as plain torch: a tensor in, one field of its output out."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            out = self.model(x, use_cache=False) if field == "logits" else self.model(x)
            return getattr(out, field)

    return Wrapped()


BERT_LIKE = dict(hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=4 * WIDTH,
                 vocab_size=VOCAB, max_position_embeddings=2 * TOKENS)
DECODER = dict(hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=4 * WIDTH,
               vocab_size=VOCAB, max_position_embeddings=2 * TOKENS)
GQA = dict(DECODER, num_key_value_heads=HEADS // 2)
VIT = dict(hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=4 * WIDTH,
           image_size=IMAGE, patch_size=8)

# name -> (what it stands for, factory)
MODELS = {
    # encoders
    "bert": ("encoder, learned positions, GELU", _text("BertConfig", "BertModel", **BERT_LIKE)),
    "roberta": ("encoder (RoBERTa)", _text("RobertaConfig", "RobertaModel", **BERT_LIKE, pad_token_id=1)),
    "distilbert": ("encoder (DistilBERT)", _text("DistilBertConfig", "DistilBertModel", dim=WIDTH, n_layers=LAYERS,
                                                 n_heads=HEADS, hidden_dim=4 * WIDTH, vocab_size=VOCAB,
                                                 max_position_embeddings=2 * TOKENS)),
    "albert": ("encoder, shared layers (ALBERT)", _text("AlbertConfig", "AlbertModel", **BERT_LIKE, embedding_size=64)),
    "electra": ("encoder (ELECTRA)", _text("ElectraConfig", "ElectraModel", **BERT_LIKE, embedding_size=64)),
    "deberta_v2": ("encoder, relative positions (DeBERTa-v2)", _text("DebertaV2Config", "DebertaV2Model", **BERT_LIKE)),
    # decoder-only language models, KV cache off
    "gpt2": ("decoder, learned positions, LayerNorm, GELU", _text(
        "GPT2Config", "GPT2LMHeadModel", "logits", n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, vocab_size=VOCAB,
        n_positions=2 * TOKENS)),
    "gpt_neo": ("decoder, local attention (GPT-Neo)", _text(
        "GPTNeoConfig", "GPTNeoForCausalLM", "logits", hidden_size=WIDTH, num_layers=LAYERS, num_heads=HEADS,
        attention_types=[[["global", "local"], LAYERS // 2]], vocab_size=VOCAB, max_position_embeddings=2 * TOKENS,
        window_size=16)),
    "opt": ("decoder, ReLU (OPT)", _text("OPTConfig", "OPTForCausalLM", "logits", hidden_size=WIDTH,
                                         num_hidden_layers=LAYERS, num_attention_heads=HEADS, ffn_dim=4 * WIDTH,
                                         vocab_size=VOCAB, max_position_embeddings=2 * TOKENS, word_embed_proj_dim=WIDTH)),
    "gpt_neox": ("decoder, partial rotary, parallel residual (Pythia)", _text(
        "GPTNeoXConfig", "GPTNeoXForCausalLM", "logits", **DECODER)),
    "bloom": ("decoder, ALiBi (BLOOM)", _text("BloomConfig", "BloomForCausalLM", "logits", hidden_size=WIDTH, n_layer=LAYERS,
                                              n_head=HEADS, vocab_size=VOCAB)),
    "llama": ("decoder, rotary, RMSNorm, gated SiLU, grouped-query", _text(
        "LlamaConfig", "LlamaForCausalLM", "logits", **GQA)),
    "mistral": ("decoder, sliding window, grouped-query", _text("MistralConfig", "MistralForCausalLM", "logits", **GQA)),
    "qwen2": ("decoder, rotary, QKV bias, grouped-query", _text("Qwen2Config", "Qwen2ForCausalLM", "logits", **GQA)),
    "phi": ("decoder, partial rotary, parallel block (Phi)", _text("PhiConfig", "PhiForCausalLM", "logits", **DECODER)),
    "gemma": ("decoder, GeGLU, RMSNorm (Gemma)", _text("GemmaConfig", "GemmaForCausalLM", "logits", **GQA, head_dim=WIDTH // HEADS)),
    # encoder-decoder models' encoders
    "t5_encoder": ("encoder of T5, relative buckets", _text(
        "T5Config", "T5EncoderModel", d_model=WIDTH, num_layers=LAYERS, num_heads=HEADS, d_ff=4 * WIDTH, d_kv=WIDTH // HEADS,
        vocab_size=VOCAB)),
    # vision transformers
    "vit": ("vision transformer", _vision("ViTConfig", "ViTModel", **VIT)),
    "deit": ("vision transformer (DeiT)", _vision("DeiTConfig", "DeiTModel", **VIT)),
    "swin": ("vision transformer, shifted windows (Swin)", _vision(
        "SwinConfig", "SwinModel", image_size=IMAGE, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=4)),
    # CNNs old and new
    "resnet": ("CNN (ResNet-18 layout)", _vision("ResNetConfig", "ResNetModel", layer_type="basic", depths=[1, 1, 1, 1],
                                                 hidden_sizes=[32, 64, 128, 256], embedding_size=32)),
    "mobilenet_v2": ("CNN, depthwise (MobileNetV2)", _vision("MobileNetV2Config", "MobileNetV2Model", image_size=IMAGE,
                                                            depth_multiplier=0.5)),
    "convnext": ("CNN, modern (ConvNeXt)", _vision("ConvNextConfig", "ConvNextModel", depths=[1, 1, 2, 1],
                                                   hidden_sizes=[32, 64, 128, 256])),
    "regnet": ("CNN, grouped (RegNet)", _vision("RegNetConfig", "RegNetModel", depths=[1, 1, 1, 1],
                                                hidden_sizes=[32, 64, 128, 256], groups_width=16, embedding_size=32)),
    # audio
    "wav2vec2": ("audio encoder, convolutional front (wav2vec 2.0)", _vision(
        "Wav2Vec2Config", "Wav2Vec2Model", shape=(1, 8000), hidden_size=WIDTH, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, intermediate_size=4 * WIDTH, conv_dim=(64,) * 7, num_conv_pos_embeddings=16)),
}


globals().update({name: make for name, (_, make) in MODELS.items()})  # FILE.py:FACTORY for tune-model


def measure(name: str) -> dict:
    """In this process: the model compiled by tensortune's backend and by inductor, checked
    and timed against eager."""
    import warnings

    import torch

    import tensortune
    from tensortune.model.build import compare, tolerance, timed_now
    from tensortune.model.vm import in_turn, torch_seconds

    torch.manual_seed(0)
    module, inputs = MODELS[name][1]()
    torch.set_num_threads(THREADS)
    # neither compile pays dynamo's first use in the process, nor does inductor find this
    # model in its on-disk caches from an earlier run (our database is empty too)
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))
    torch._dynamo.reset()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    with torch.no_grad():
        expected = module(*inputs)
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            backend = tensortune.backend(db=f"{tmp}/empty.db", threads=THREADS)
            compiled = torch.compile(module, backend=backend)
            start = time.perf_counter()
            got = compiled(*inputs)
            compile_s = time.perf_counter() - start
            # in turn, rounds of each: one timing of each minutes apart moved 0.8-1.2x on this shared machine
            ours, eager = in_turn(timed_now, ("ours", lambda: torch_seconds(lambda: compiled(*inputs), THREADS)),
                                  ("eager", lambda _: torch_seconds(lambda: module(*inputs), THREADS)))
        torch._dynamo.reset()
        inductor = torch.compile(module)
        start = time.perf_counter()
        inductor(*inputs)
        inductor_s = time.perf_counter() - start
    in_tvm_eager = sum(region.built.timed.get("eager", 0.0) for region in backend.regions)
    left: dict[str, int] = {}
    for graph in backend.in_torch:
        for op, count in graph.items():
            left[op] = left.get(op, 0) + count
    return {"model": name, "compile_s": compile_s, "inductor_compile_s": inductor_s, "eager_s": eager, "ours_s": ours,
            "error": compare([got.numpy()], [expected.numpy()]), "tolerance": tolerance(expected.numpy().dtype),
            "graphs": len(backend.in_torch), "regions": len(backend.regions), "share_in_tvm": backend.share_in_tvm,
            "eager_share_in_tvm": min(1.0, in_tvm_eager / eager), "left_in_torch": left, "refused": backend.refused,
            "in_eager": backend.in_eager, "warnings": [str(w.message)[:300] for w in caught if "tensortune" in str(w.message)]}


def tune_model(name: str, trials: int, timeout: float) -> dict:
    """The model through `tensortune tune-model` at `trials`, in a fresh process: its summary."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = subprocess.run([sys.executable, "-m", "tensortune", "tune-model", f"{os.path.abspath(__file__)}:{name}",
                                   "--trials", str(trials), "--db", f"{tmp}/t.db", "--out", f"{tmp}/out", "--json"],
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"model": name, "failed": f"no result within {timeout:.0f} s"}
    if done.returncode != 0:
        return {"model": name, "failed": f"exit {done.returncode}: {(done.stderr.strip().splitlines() or ['-'])[-1][:200]}"}
    summary = json.loads(done.stdout)
    return {"model": name, "seconds": time.perf_counter() - start, "trials": summary["trials"],
            "error": summary["checked_against_torch"], "in_torch": (summary["in_torch"] or {}).get("operators", {}),
            "tuned_vs_eager": (summary["end_to_end"] or {}).get("tuned_vs_eager")}  # None: nothing in PyTorch, not timed


def tuned_line(row: dict) -> str:
    """A model's line of the tune-model table."""
    if "failed" in row:
        return f"{row['model']:13} FAILED: {row['failed']}"
    timed = f"tuned {row['tuned_vs_eager']:.2f}x eager" if row["tuned_vs_eager"] else "not timed"
    return (f"{row['model']:13} {row['seconds']:6.0f} s  error {row['error']:.1e}  {timed}  "
            f"left in PyTorch: {row['in_torch'] or 'none'}")


def in_child(name: str, timeout: float) -> dict:
    """`measure` in a fresh process, within `timeout` seconds."""
    from children import in_child as run

    return run(__file__, name, timeout)


def why_left(row: dict) -> str:
    """The operators left in PyTorch, most first, with TVM's reason where it refused them."""
    parts = [f"{op} x{n}" + (f" ({row['refused'][op][:60]})" if op in row["refused"] else "")
             for op, n in sorted(row["left_in_torch"].items(), key=lambda item: -item[1])[:3]]
    parts += [f"{region}: {why[:80]}" for region, why in list(row["in_eager"].items())[:2]]
    return "; ".join(parts) or "-"


def table(rows: list[dict]) -> list[str]:
    lines = [f"{'model':13} {'compile s':>9} {'inductor':>8} {'regions':>7} {'ops TVM':>7} {'time TVM':>8} "
             f"{'max error':>9} {'eager ms':>8} {'ours ms':>8} {'x eager':>7}  left in PyTorch (why)"]
    for row in rows:
        if "failed" in row:
            lines.append(f"{row['model']:13} FAILED: {row['failed']}")
            continue
        lines.append(f"{row['model']:13} {row['compile_s']:9.1f} {row['inductor_compile_s']:8.1f} {row['regions']:7d} "
                     f"{row['share_in_tvm']:7.0%} {row['eager_share_in_tvm']:8.0%} {row['error']:9.1e} "
                     f"{row['eager_s'] * 1e3:8.2f} {row['ours_s'] * 1e3:8.2f} {row['eager_s'] / row['ours_s']:6.2f}x  "
                     f"{why_left(row)}")
    done = [r for r in rows if "failed" not in r]
    if done:
        ratio = statistics.median(r["compile_s"] / r["inductor_compile_s"] for r in done)
        lines += ["", f"{len(done)} of {len(rows)} models compiled; within 60 s: "
                      f"{sum(r['compile_s'] <= 60 for r in done)}; median compile / inductor's: {ratio:.2f}x; "
                      f">= 90% of operators in TVM: {sum(r['share_in_tvm'] >= 0.9 for r in done)}; "
                      f"matching eager: {sum(r['error'] <= r['tolerance'] for r in done)}; "
                      f">= 0.95x eager: {sum(r['eager_s'] / r['ours_s'] >= 0.95 for r in done)}",
                  "slowest compiles: " + ", ".join(f"{r['model']} {r['compile_s']:.0f} s" for r in
                                                   sorted(done, key=lambda r: -r["compile_s"])[:10])]
    return lines


def main() -> None:
    from provenance import header, publish  # here: tune-model loads this file as a module, from elsewhere

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), metavar="MODEL")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a model may take, all of it")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--tune-model", type=int, metavar="TRIALS", help="through tune-model at this budget instead")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    head = header(THREADS)
    if args.tune_model:
        rows = []
        for name in args.models:
            rows.append(tune_model(name, args.tune_model, args.timeout))
            print(tuned_line(rows[-1]), file=sys.stderr, flush=True)  # the model's row, as it comes
        publish("\n".join([*head, f"tune-model at {args.tune_model} trials, each model in a fresh process", "",
                           *map(tuned_line, rows), "", f"{sum('failed' not in r for r in rows)} of {len(rows)} tuned, "
                           f"built, checked and exported"]), args.out)
        return
    rows = []
    for name in args.models:
        rows.append(in_child(name, args.timeout))
        print(table(rows[-1:])[1], file=sys.stderr, flush=True)  # the model's row, as it comes
    publish("\n".join([*head, "backend in default mode on an empty database; inductor: torch.compile's default, "
                              "its caches empty; dynamo warmed up for both; "
                              "time TVM: share of eager's time in the regions TVM runs", "", *table(rows), "",
                       json.dumps(rows, indent=1)]), args.out)


if __name__ == "__main__":
    sys.exit(main())
