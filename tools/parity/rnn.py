#!/usr/bin/env python3
"""PyTorch's side of the recurrent-layer parity tests: nn.LSTM, nn.GRU, nn.RNN and their
cells, their outputs, final states and gradients written to tools/parity/fixtures/rnn.json,
which crates/nn/tests/parity_rnn.rs rebuilds with ember and compares.

Regenerate (from the repository root, with any Python that has torch; CI never runs this):

    .venv-torch/bin/python tools/parity/rnn.py

The fixture format, the seeding (CRC-32 of each scenario's name) and the tensor encoding
are those of tools/parity/autograd.py, whose helpers this script reuses. Everything is
float64 unless the scenario name ends in `_f32`. Each scenario's loss weights the output
and the final states with fixed random weights, so that every gradient element differs.
Module parameters are recorded under their state_dict names (prefixed where a scenario
has several modules), and their gradients under the same names.
"""

import os
import sys

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from autograd import Scenario, render, weights  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "rnn.json")

SCENARIOS = []


def scenario(about):
    def register(f):
        SCENARIOS.append((f.__name__, about, f))
        return f

    return register


def module_params(s, module, prefix=""):
    """Records the module's parameters as inputs named by the state dict and loads the
    recorded values back, so both sides start from the same numbers."""
    module = module.to(s.dtype)
    for k, p in module.named_parameters():
        s.param(prefix + k, p)
    return module


def weighted(s, key, y):
    return (y * weights(s, "r_" + key, tuple(y.shape))).sum()


def finish(s, loss, module, leaves, prefix=""):
    loss.backward()
    s.output("loss", loss)
    for k, p in module.named_parameters():
        s.grad(prefix + k, p.grad)
    for k, v in leaves:
        s.grad(k, v.grad)


def run_layer(s, module, x, state):
    output, hn = module(x, state)
    s.output("output", output)
    if isinstance(hn, tuple):
        s.output("h_n", hn[0])
        s.output("c_n", hn[1])
        loss = weighted(s, "output", output) + weighted(s, "h_n", hn[0]) + weighted(s, "c_n", hn[1])
    else:
        s.output("h_n", hn)
        loss = weighted(s, "output", output) + weighted(s, "h_n", hn)
    return loss


def lstm_2layer_bidirectional_impl(s, batch_first):
    lstm = module_params(s, nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=batch_first))
    x = s.param("x", s.randn(2, 5, 3) if batch_first else s.randn(5, 2, 3))
    h0 = s.param("h0", s.randn(4, 2, 4))
    c0 = s.param("c0", s.randn(4, 2, 4))
    loss = run_layer(s, lstm, x, (h0, c0))
    finish(s, loss, lstm, (("x", x), ("h0", h0), ("c0", c0)))


@scenario("nn.LSTM(3, 4, num_layers=2, bidirectional=True), T=5, B=2, given (h0, c0)")
def lstm_2layer_bidirectional(s):
    lstm_2layer_bidirectional_impl(s, False)


@scenario("the 2-layer bidirectional LSTM with batch_first=True, in float32")
def lstm_2layer_bidirectional_batch_first_f32(s):
    lstm_2layer_bidirectional_impl(s, True)


@scenario("nn.LSTM(3, 5, num_layers=2, proj_size=2), T=4, B=3, given (h0, c0)")
def lstm_proj(s):
    lstm = module_params(s, nn.LSTM(3, 5, num_layers=2, proj_size=2))
    x = s.param("x", s.randn(4, 3, 3))
    h0 = s.param("h0", s.randn(2, 3, 2))
    c0 = s.param("c0", s.randn(2, 3, 5))
    loss = run_layer(s, lstm, x, (h0, c0))
    finish(s, loss, lstm, (("x", x), ("h0", h0), ("c0", c0)))


@scenario("nn.GRU(3, 4, num_layers=2, batch_first=True), B=2, T=5, given h0")
def gru_2layer(s):
    gru = module_params(s, nn.GRU(3, 4, num_layers=2, batch_first=True))
    x = s.param("x", s.randn(2, 5, 3))
    h0 = s.param("h0", s.randn(2, 2, 4))
    loss = run_layer(s, gru, x, h0)
    finish(s, loss, gru, (("x", x), ("h0", h0)))


@scenario("nn.GRU(3, 4, bidirectional=True, bias=False) from zeros, float32")
def gru_bidirectional_no_bias_f32(s):
    gru = module_params(s, nn.GRU(3, 4, bidirectional=True, bias=False))
    x = s.param("x", s.randn(6, 3, 3))
    loss = run_layer(s, gru, x, None)
    finish(s, loss, gru, (("x", x),))


@scenario("nn.RNN(3, 4, nonlinearity='relu', bidirectional=True) on an unbatched [T, in] input")
def rnn_relu_unbatched(s):
    rnn = module_params(s, nn.RNN(3, 4, nonlinearity="relu", bidirectional=True))
    x = s.param("x", s.randn(5, 3))
    h0 = s.param("h0", s.randn(2, 4))
    loss = run_layer(s, rnn, x, h0)
    finish(s, loss, rnn, (("x", x), ("h0", h0)))


@scenario("nn.RNN(3, 4, num_layers=2) with tanh from zeros")
def rnn_tanh_2layer(s):
    rnn = module_params(s, nn.RNN(3, 4, num_layers=2))
    x = s.param("x", s.randn(4, 2, 3))
    loss = run_layer(s, rnn, x, None)
    finish(s, loss, rnn, (("x", x),))


def packed(s, module, x, lengths, state):
    """pack_padded_sequence(enforce_sorted=False) -> module -> pad_packed_sequence back to
    the padded length: ember's run_with_lengths."""
    s.const("lengths", torch.tensor(lengths, dtype=torch.int64))
    p = pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False)
    out, hn = module(p, state)
    output, _ = pad_packed_sequence(out, total_length=x.shape[0])
    s.output("output", output)
    if isinstance(hn, tuple):
        s.output("h_n", hn[0])
        s.output("c_n", hn[1])
        return weighted(s, "output", output) + weighted(s, "h_n", hn[0]) + weighted(s, "c_n", hn[1])
    s.output("h_n", hn)
    return weighted(s, "output", output) + weighted(s, "h_n", hn)


@scenario("2-layer bidirectional LSTM on a packed batch of unsorted lengths [3, 6, 1, 4], padded to T=6")
def lstm_packed_lengths(s):
    lstm = module_params(s, nn.LSTM(3, 4, num_layers=2, bidirectional=True))
    x = s.param("x", s.randn(6, 4, 3))
    h0 = s.param("h0", s.randn(4, 4, 4))
    c0 = s.param("c0", s.randn(4, 4, 4))
    loss = packed(s, lstm, x, [3, 6, 1, 4], (h0, c0))
    finish(s, loss, lstm, (("x", x), ("h0", h0), ("c0", c0)))


@scenario("bidirectional GRU on a packed batch of lengths [2, 4, 3], padded to T=5 (beyond the longest)")
def gru_packed_lengths(s):
    gru = module_params(s, nn.GRU(3, 4, bidirectional=True))
    x = s.param("x", s.randn(5, 3, 3))
    loss = packed(s, gru, x, [2, 4, 3], None)
    finish(s, loss, gru, (("x", x),))


@scenario("LSTMCell, GRUCell and RNNCell(relu), two steps each, batched, and one unbatched step")
def cells(s):
    lstm = module_params(s, nn.LSTMCell(3, 4), "lstm.")
    gru = module_params(s, nn.GRUCell(3, 4), "gru.")
    rnn = module_params(s, nn.RNNCell(3, 4, nonlinearity="relu"), "rnn.")
    x1 = s.param("x1", s.randn(2, 3))
    x2 = s.param("x2", s.randn(2, 3))
    h0 = s.param("h0", s.randn(2, 4))
    c0 = s.param("c0", s.randn(2, 4))
    u = s.param("u", s.randn(3))
    h, c = lstm(x1, (h0, c0))
    h, c = lstm(x2, (h, c))
    g = gru(x2, gru(x1, h0))
    r = rnn(x2, rnn(x1))
    v = gru(u)
    for k, t in (("lstm_h", h), ("lstm_c", c), ("gru_h", g), ("rnn_h", r), ("gru_unbatched", v)):
        s.output(k, t)
    loss = sum(weighted(s, k, t) for k, t in (("lstm_h", h), ("lstm_c", c), ("gru_h", g), ("rnn_h", r), ("v", v)))
    loss.backward()
    s.output("loss", loss)
    for prefix, m in (("lstm.", lstm), ("gru.", gru), ("rnn.", rnn)):
        for k, p in m.named_parameters():
            s.grad(prefix + k, p.grad)
    for k, t in (("x1", x1), ("x2", x2), ("h0", h0), ("c0", c0), ("u", u)):
        s.grad(k, t.grad)


def main():
    torch.set_num_threads(1)
    out = []
    for name, about, f in SCENARIOS:
        s = Scenario(name, about)
        f(s)
        out.append(s.to_json())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write(render({"generator": "tools/parity/rnn.py", "torch": torch.__version__, "scenarios": out}))
    print(f"wrote {len(out)} scenarios to {os.path.relpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
