#!/usr/bin/env python3
"""Inference speed of the pretrained architectures in PyTorch (transformers, and for
ResNet-50 the torchvision-layout twin of tools/parity/model_fixtures/resnet.py), the
counterpart of `cargo run --release -p ember-models --example models_bench`, at 2 threads,
f32, under torch.inference_mode():

    models_torch.py WORKLOAD [REPS]

prints `WORKLOAD per_s=... unit=... median_ms=... peak_rss_mb=...` as the ember example
does, for the same workloads (see crates/models/examples/models_bench.rs):

- small-generate: data/models/gpt2-shakespeare loaded by transformers itself, greedy
  generate() with use_cache=True at batch 1, the prompt 1..16, exactly 128 new tokens
  (min_new_tokens = max_new_tokens, so the end-of-text token cannot stop it early).
- gpt2-generate: GPT2LMHeadModel(GPT2Config()) (GPT-2-small's shape, random weights), the
  prompt 1..16, exactly 64 new tokens.
- gpt2-prompt: the same model, one forward of the prompt 1..512 into an empty DynamicCache,
  keeping the last position's logits (logits_to_keep=1, as generate() does with a prompt).
- resnet50: the torchvision-layout ResNet-50 (1000 classes, random weights) in eval mode on
  a batch of 8 images of 3x224x224.

One untimed repetition warms up before REPS timed ones (default 5 for the small model, 3
otherwise; MODELS_BENCH_THREADS sets another number of threads, as for the ember example);
per_s is the work of one repetition over the median time. peak_rss_mb is the
process's peak resident set (ru_maxrss), Python and torch included.

Run with the PyTorch venv from the repository root:
    .venv-torch/bin/python tools/bench/models_torch.py gpt2-generate
"""

import os
import resource
import statistics
import sys
import time

import torch

SMALL_MODEL = "data/models/gpt2-shakespeare"
PROMPT_LEN, SMALL_NEW, GPT2_NEW, LONG_PROMPT, RESNET_BATCH = 16, 128, 64, 512, 8


def time_ms(reps, work):
    work()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def prompt(length):
    return torch.arange(1, length + 1).unsqueeze(0)


def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config()).eval()


def generation(model, new, reps):
    ids = prompt(PROMPT_LEN)
    mask = torch.ones_like(ids)

    def work():
        out = model.generate(
            ids,
            attention_mask=mask,
            do_sample=False,
            num_beams=1,
            use_cache=True,
            max_new_tokens=new,
            min_new_tokens=new,
            pad_token_id=0,
        )
        assert out.shape[1] == PROMPT_LEN + new, out.shape

    return time_ms(reps, work)


def prompt_forward(model, reps):
    from transformers import DynamicCache

    ids = prompt(LONG_PROMPT)

    def work():
        out = model(ids, past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1)
        out.logits[:, -1].argmax(-1).tolist()

    return time_ms(reps, work)


def resnet50(reps):
    sys.path.insert(0, os.path.join("tools", "parity"))
    from model_fixtures.resnet import Bottleneck, ResNet

    model = ResNet(Bottleneck, [3, 4, 6, 3], 1000).eval()
    images = torch.randn(RESNET_BATCH, 3, 224, 224)
    return time_ms(reps, lambda: model(images).tolist())


def main():
    workload = sys.argv[1] if len(sys.argv) > 1 else "small-generate"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else None
    torch.set_num_threads(int(os.environ.get("MODELS_BENCH_THREADS", "2")))
    torch.manual_seed(0)
    with torch.inference_mode():
        if workload == "small-generate":
            from transformers import GPT2LMHeadModel

            model = GPT2LMHeadModel.from_pretrained(SMALL_MODEL).eval()
            ms, work, unit = generation(model, SMALL_NEW, reps or 5), SMALL_NEW, "tokens/s"
        elif workload == "gpt2-generate":
            ms, work, unit = generation(gpt2_small(), GPT2_NEW, reps or 3), GPT2_NEW, "tokens/s"
        elif workload == "gpt2-prompt":
            ms, work, unit = prompt_forward(gpt2_small(), reps or 3), LONG_PROMPT, "tokens/s"
        elif workload == "resnet50":
            ms, work, unit = resnet50(reps or 3), RESNET_BATCH, "images/s"
        else:
            sys.exit(f"unknown workload {workload}: small-generate, gpt2-generate, gpt2-prompt or resnet50")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{workload} per_s={work * 1e3 / ms:.3f} unit={unit} median_ms={ms:.3f} peak_rss_mb={peak:.1f}")


if __name__ == "__main__":
    main()
