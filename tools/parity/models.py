#!/usr/bin/env python3
"""Fixtures of ember-models (crates/models/tests/): tiny random checkpoints of each
architecture in its published layout, with what PyTorch computes from them.

Each architecture has a module in tools/parity/model_fixtures/ with a `make(out_dir)` that
writes tools/parity/fixtures/models/<arch>/: checkpoint directories saved with
`save_pretrained` (Hugging Face) or `torch.save` (torchvision), their logits and hidden
states on fixed inputs, greedy continuations with the top-2 logit margin of each step, and
the tokenizer checks. Configurations are tiny (a few hundred KB) and varied, so that a
loader tuned to one layout fails a test.

Needs `transformers` and `tokenizers` from PyPI beside torch. Regenerate (from the
repository root; CI never runs this):

    .venv-torch/bin/python tools/parity/models.py            # every architecture
    .venv-torch/bin/python tools/parity/models.py gpt2 llama # some
"""

import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "models")
ARCHS = ["gpt2", "llama", "bert", "resnet", "vit"]


def main(argv):
    sys.path.insert(0, HERE)
    wanted = argv or ARCHS
    for arch in wanted:
        if arch not in ARCHS:
            raise SystemExit(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
        module = importlib.import_module(f"model_fixtures.{arch}")
        out = os.path.join(OUT, arch)
        os.makedirs(out, exist_ok=True)
        module.make(out)
        print(f"{arch}: wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
