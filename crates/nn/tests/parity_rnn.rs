//! PyTorch parity of the recurrent layers and cells: outputs, final states, a loss and
//! every parameter and input gradient, compared with what PyTorch computed from the same
//! parameters and inputs.
//!
//! The expected numbers are committed in `tools/parity/fixtures/rnn.json`, written by
//! `tools/parity/rnn.py` (regenerate with `python tools/parity/rnn.py` from the repository
//! root, in an environment with torch), so this test needs no Python. Each scenario here is
//! the same computation as the Python function of the same name; module parameters are
//! fixture inputs under their `state_dict` names, loaded with `load_state_dict`.
//!
//! `f64` scenarios must agree within `1e-10 + 1e-10 * |expected|`, `f32` ones (names ending
//! in `_f32`) within `1e-5 + 1e-5 * |expected|`. A scenario fails on any mismatch, on an
//! ember error, and on any fixture tensor it did not use or compare.

use ember_autograd::Var;
use ember_nn::{
    CellOptions, GRU, GRUCell, LSTM, LSTMCell, LstmState, Module, Nonlinearity, RNN, RNNCell, RnnOptions, StateDict,
};
use ember_tensor::{DType, Result};
use ember_testing::Case;

ember_testing::parity_suite! {
    fixture: "rnn.json",
    tolerance: ember_testing::f64_or_f32_by_name,
    scenarios: [
        lstm_2layer_bidirectional,
        lstm_2layer_bidirectional_batch_first_f32,
        lstm_proj,
        gru_2layer,
        gru_bidirectional_no_bias_f32,
        rnn_relu_unbatched,
        rnn_tanh_2layer,
        lstm_packed_lengths,
        gru_packed_lengths,
        cells,
    ],
}

/// The scenarios, each the same computation as the Python function of the same name.
mod build {
    use super::*;

    fn dtype(c: &Case<'_>) -> DType {
        if c.name().ends_with("_f32") { DType::F32 } else { DType::F64 }
    }

    /// Loads the fixture's values of `module`'s parameters (named `prefix` + state-dict
    /// name).
    fn load(c: &mut Case<'_>, module: &dyn Module, prefix: &str) -> Result<()> {
        let mut state = StateDict::new();
        for (k, _) in module.named_parameters() {
            state.insert(k.clone(), c.tensor(&format!("{prefix}{k}")));
        }
        module.load_state_dict(&state)
    }

    /// `sum(y * r_key)`.
    fn weighted(c: &mut Case<'_>, key: &str, y: &Var) -> Result<Var> {
        let r = c.constant(&format!("r_{key}"));
        Ok(y.mul(&r)?.sum_all())
    }

    /// Backward from `loss`; compares it and the gradients of the module's parameters and
    /// of the `leaves`.
    fn finish(c: &mut Case<'_>, loss: &Var, module: &dyn Module, prefix: &str, leaves: &[(&str, &Var)]) -> Result<()> {
        loss.backward()?;
        c.output("loss", loss);
        for (k, p) in module.named_parameters() {
            c.grad(&format!("{prefix}{k}"), &p);
        }
        for (k, v) in leaves {
            c.grad(k, v);
        }
        Ok(())
    }

    /// Compares an LSTM's results and returns the scenario's loss.
    fn lstm_loss(c: &mut Case<'_>, output: &Var, h_n: &Var, c_n: &Var) -> Result<Var> {
        c.output("output", output);
        c.output("h_n", h_n);
        c.output("c_n", c_n);
        weighted(c, "output", output)?.add(&weighted(c, "h_n", h_n)?)?.add(&weighted(c, "c_n", c_n)?)
    }

    /// Compares an RNN's or a GRU's results and returns the scenario's loss.
    fn rnn_loss(c: &mut Case<'_>, output: &Var, h_n: &Var) -> Result<Var> {
        c.output("output", output);
        c.output("h_n", h_n);
        weighted(c, "output", output)?.add(&weighted(c, "h_n", h_n)?)
    }

    fn lstm_2layer_bidirectional_impl(c: &mut Case<'_>, batch_first: bool) -> Result<()> {
        let o = RnnOptions::default().num_layers(2).bidirectional(true).batch_first(batch_first).dtype(dtype(c));
        let lstm = LSTM::with_options(3, 4, o)?;
        load(c, &lstm, "")?;
        let (x, h0, c0) = (c.param("x"), c.param("h0"), c.param("c0"));
        let out = lstm.run(&x, Some((&h0, &c0)))?;
        let loss = lstm_loss(c, &out.output, &out.h_n, &out.c_n)?;
        finish(c, &loss, &lstm, "", &[("x", &x), ("h0", &h0), ("c0", &c0)])
    }

    pub fn lstm_2layer_bidirectional(c: &mut Case<'_>) -> Result<()> {
        lstm_2layer_bidirectional_impl(c, false)
    }

    pub fn lstm_2layer_bidirectional_batch_first_f32(c: &mut Case<'_>) -> Result<()> {
        lstm_2layer_bidirectional_impl(c, true)
    }

    pub fn lstm_proj(c: &mut Case<'_>) -> Result<()> {
        let lstm = LSTM::with_options(3, 5, RnnOptions::default().num_layers(2).proj_size(2).dtype(DType::F64))?;
        load(c, &lstm, "")?;
        let (x, h0, c0) = (c.param("x"), c.param("h0"), c.param("c0"));
        let out = lstm.run(&x, Some((&h0, &c0)))?;
        let loss = lstm_loss(c, &out.output, &out.h_n, &out.c_n)?;
        finish(c, &loss, &lstm, "", &[("x", &x), ("h0", &h0), ("c0", &c0)])
    }

    pub fn gru_2layer(c: &mut Case<'_>) -> Result<()> {
        let gru = GRU::with_options(3, 4, RnnOptions::default().num_layers(2).batch_first(true).dtype(DType::F64))?;
        load(c, &gru, "")?;
        let (x, h0) = (c.param("x"), c.param("h0"));
        let out = gru.run(&x, Some(&h0))?;
        let loss = rnn_loss(c, &out.output, &out.h_n)?;
        finish(c, &loss, &gru, "", &[("x", &x), ("h0", &h0)])
    }

    pub fn gru_bidirectional_no_bias_f32(c: &mut Case<'_>) -> Result<()> {
        let gru = GRU::with_options(3, 4, RnnOptions::default().bidirectional(true).bias(false))?;
        load(c, &gru, "")?;
        let x = c.param("x");
        let out = gru.run(&x, None)?;
        let loss = rnn_loss(c, &out.output, &out.h_n)?;
        finish(c, &loss, &gru, "", &[("x", &x)])
    }

    pub fn rnn_relu_unbatched(c: &mut Case<'_>) -> Result<()> {
        let o = RnnOptions::default().nonlinearity(Nonlinearity::Relu).bidirectional(true).dtype(DType::F64);
        let rnn = RNN::with_options(3, 4, o)?;
        load(c, &rnn, "")?;
        let (x, h0) = (c.param("x"), c.param("h0"));
        let out = rnn.run(&x, Some(&h0))?;
        let loss = rnn_loss(c, &out.output, &out.h_n)?;
        finish(c, &loss, &rnn, "", &[("x", &x), ("h0", &h0)])
    }

    pub fn rnn_tanh_2layer(c: &mut Case<'_>) -> Result<()> {
        let rnn = RNN::with_options(3, 4, RnnOptions::default().num_layers(2).dtype(DType::F64))?;
        load(c, &rnn, "")?;
        let x = c.param("x");
        let out = rnn.run(&x, None)?;
        let loss = rnn_loss(c, &out.output, &out.h_n)?;
        finish(c, &loss, &rnn, "", &[("x", &x)])
    }

    fn lengths(c: &mut Case<'_>) -> Result<Vec<usize>> {
        Ok(c.tensor("lengths").to_vec::<i64>()?.into_iter().map(|n| n as usize).collect())
    }

    pub fn lstm_packed_lengths(c: &mut Case<'_>) -> Result<()> {
        let o = RnnOptions::default().num_layers(2).bidirectional(true).dtype(DType::F64);
        let lstm = LSTM::with_options(3, 4, o)?;
        load(c, &lstm, "")?;
        let (x, h0, c0) = (c.param("x"), c.param("h0"), c.param("c0"));
        let lengths = lengths(c)?;
        let out = lstm.run_with_lengths(&x, &lengths, Some((&h0, &c0)))?;
        let loss = lstm_loss(c, &out.output, &out.h_n, &out.c_n)?;
        finish(c, &loss, &lstm, "", &[("x", &x), ("h0", &h0), ("c0", &c0)])
    }

    pub fn gru_packed_lengths(c: &mut Case<'_>) -> Result<()> {
        let gru = GRU::with_options(3, 4, RnnOptions::default().bidirectional(true).dtype(DType::F64))?;
        load(c, &gru, "")?;
        let x = c.param("x");
        let lengths = lengths(c)?;
        let out = gru.run_with_lengths(&x, &lengths, None)?;
        let loss = rnn_loss(c, &out.output, &out.h_n)?;
        finish(c, &loss, &gru, "", &[("x", &x)])
    }

    pub fn cells(c: &mut Case<'_>) -> Result<()> {
        let o = CellOptions::default().dtype(DType::F64);
        let lstm = LSTMCell::with_options(3, 4, o)?;
        let gru = GRUCell::with_options(3, 4, o)?;
        let rnn = RNNCell::with_options(3, 4, o.nonlinearity(Nonlinearity::Relu))?;
        load(c, &lstm, "lstm.")?;
        load(c, &gru, "gru.")?;
        load(c, &rnn, "rnn.")?;
        let (x1, x2, h0, c0, u) = (c.param("x1"), c.param("x2"), c.param("h0"), c.param("c0"), c.param("u"));
        let s = lstm.run(&x1, Some(&LstmState { h: h0.clone(), c: c0.clone() }))?;
        let s = lstm.run(&x2, Some(&s))?;
        let g = gru.run(&x2, Some(&gru.run(&x1, Some(&h0))?))?;
        let r = rnn.run(&x2, Some(&rnn.run(&x1, None)?))?;
        let v = gru.run(&u, None)?;
        for (k, t) in [("lstm_h", &s.h), ("lstm_c", &s.c), ("gru_h", &g), ("rnn_h", &r), ("gru_unbatched", &v)] {
            c.output(k, t);
        }
        let mut loss = weighted(c, "lstm_h", &s.h)?;
        for (k, t) in [("lstm_c", &s.c), ("gru_h", &g), ("rnn_h", &r), ("v", &v)] {
            loss = loss.add(&weighted(c, k, t)?)?;
        }
        loss.backward()?;
        c.output("loss", &loss);
        for (prefix, m) in [("lstm.", &lstm as &dyn Module), ("gru.", &gru), ("rnn.", &rnn)] {
            for (k, p) in m.named_parameters() {
                c.grad(&format!("{prefix}{k}"), &p);
            }
        }
        for (k, t) in [("x1", &x1), ("x2", &x2), ("h0", &h0), ("c0", &c0), ("u", &u)] {
            c.grad(k, t);
        }
        Ok(())
    }
}
