//! Gradients of the recurrent cells and layers against `f64` central differences, to first
//! and second order, with respect to the inputs, the initial states and every parameter:
//! each cell, multi-layer bidirectional layers, `batch_first` and unbatched inputs, the
//! LSTM projection, variable lengths, and non-contiguous inputs.
//!
//! Second order: gradcheck of a function returning the first derivative computed with
//! `create_graph` (for every input, against a random output gradient that is itself an
//! input), which needs every backward on the way to be a differentiable, correct
//! composition.

use ember_autograd::Var;
use ember_nn::{CellOptions, GRU, GRUCell, LSTM, LSTMCell, LstmState, Module, Nonlinearity, RNN, RNNCell, RnnOptions};
use ember_tensor::{DType, Result, Tensor};
use ember_testing::gradcheck::{check_both, normal, seeded, stored_swapped};

/// The same values stored with the first two dimensions swapped, read through a transpose.
fn transposed01(t: &Tensor) -> Tensor {
    stored_swapped(t, 0, 1)
}

/// Every result joined into one vector, so that one gradcheck covers them all.
fn joined(parts: &[&Var]) -> Result<Var> {
    let flat: Vec<Var> = parts.iter().map(|v| v.flatten_all()).collect();
    Var::cat(&flat.iter().collect::<Vec<_>>(), 0)
}

/// The names and values of a freshly initialised module's parameters (drawn under the
/// lock, from `seed`).
fn params_of(seed: u64, build: impl FnOnce() -> Vec<(String, Var)>) -> (Vec<String>, Vec<Tensor>) {
    seeded(seed, || build().into_iter().map(|(n, v)| (n, v.value())).unzip())
}

/// `names` paired with `vars`, for `from_params`.
fn named(names: &[String], vars: &[Var]) -> Vec<(String, Var)> {
    names.iter().cloned().zip(vars.iter().cloned()).collect()
}

#[test]
fn cell_gradients() {
    let o = CellOptions::default().dtype(DType::F64);
    for (k, relu) in [false, true].into_iter().enumerate() {
        let seed = 10 + 10 * k as u64;
        let o = if relu { o.nonlinearity(Nonlinearity::Relu) } else { o };
        let (names, params) = params_of(seed, || RNNCell::with_options(3, 2, o).unwrap().named_parameters());
        let mut inputs = vec![normal(seed + 1, &[2, 3]), normal(seed + 2, &[2, 2])];
        inputs.extend(params);
        let f = |v: &[Var]| RNNCell::from_params(3, 2, o, named(&names, &v[2..]))?.run(&v[0], Some(&v[1]));
        check_both(&format!("RNNCell relu={relu}"), f, &inputs, seed + 3);
    }

    let (names, params) = params_of(40, || LSTMCell::with_options(3, 2, o).unwrap().named_parameters());
    let mut inputs = vec![transposed01(&normal(41, &[2, 3])), normal(42, &[2, 2]), normal(43, &[2, 2])];
    inputs.extend(params);
    let f = |v: &[Var]| {
        let cell = LSTMCell::from_params(3, 2, o, named(&names, &v[3..]))?;
        let s = cell.run(&v[0], Some(&LstmState { h: v[1].clone(), c: v[2].clone() }))?;
        joined(&[&s.h, &s.c])
    };
    check_both("LSTMCell (non-contiguous input)", f, &inputs, 44);

    let (names, params) = params_of(50, || GRUCell::with_options(3, 2, o).unwrap().named_parameters());
    let mut inputs = vec![normal(51, &[3]), normal(52, &[2])];
    inputs.extend(params);
    let f = |v: &[Var]| {
        let cell = GRUCell::from_params(3, 2, o, named(&names, &v[2..]))?;
        // Two steps, so that the state's own path is exercised.
        cell.run(&v[0], Some(&cell.run(&v[0], Some(&v[1]))?))
    };
    check_both("GRUCell (unbatched, two steps)", f, &inputs, 53);
}

#[test]
fn lstm_bidirectional_two_layers() {
    let o = RnnOptions::default().num_layers(2).bidirectional(true).dtype(DType::F64);
    let (names, params) = params_of(100, || LSTM::with_options(2, 2, o).unwrap().named_parameters());
    let mut inputs = vec![normal(101, &[3, 2, 2]), normal(102, &[4, 2, 2]), normal(103, &[4, 2, 2])];
    inputs.extend(params);
    let f = |v: &[Var]| {
        let lstm = LSTM::from_params(2, 2, o, named(&names, &v[3..]))?;
        let out = lstm.run(&v[0], Some((&v[1], &v[2])))?;
        joined(&[&out.output, &out.h_n, &out.c_n])
    };
    check_both("LSTM 2 layers bidirectional", f, &inputs, 104);
}

#[test]
fn lstm_projection_batch_first() {
    let o = RnnOptions::default().proj_size(2).batch_first(true).dtype(DType::F64);
    let (names, params) = params_of(110, || LSTM::with_options(2, 3, o).unwrap().named_parameters());
    // A non-contiguous [B, T, in] input.
    let mut inputs = vec![transposed01(&normal(111, &[2, 3, 2])), normal(112, &[1, 2, 2]), normal(113, &[1, 2, 3])];
    inputs.extend(params);
    let f = |v: &[Var]| {
        let lstm = LSTM::from_params(2, 3, o, named(&names, &v[3..]))?;
        let out = lstm.run(&v[0], Some((&v[1], &v[2])))?;
        joined(&[&out.output, &out.h_n, &out.c_n])
    };
    check_both("LSTM proj_size batch_first", f, &inputs, 114);
}

#[test]
fn gru_and_rnn_bidirectional() {
    let o = RnnOptions::default().num_layers(2).bidirectional(true).dtype(DType::F64);
    let (names, params) = params_of(120, || GRU::with_options(2, 2, o).unwrap().named_parameters());
    let mut inputs = vec![normal(121, &[3, 2, 2]), normal(122, &[4, 2, 2])];
    inputs.extend(params);
    let f = |v: &[Var]| {
        let out = GRU::from_params(2, 2, o, named(&names, &v[2..]))?.run(&v[0], Some(&v[1]))?;
        joined(&[&out.output, &out.h_n])
    };
    check_both("GRU 2 layers bidirectional", f, &inputs, 123);

    let o = RnnOptions::default().bidirectional(true).bias(false).dtype(DType::F64);
    let (names, params) = params_of(130, || RNN::with_options(2, 3, o).unwrap().named_parameters());
    let mut inputs = vec![normal(131, &[4, 2]), normal(132, &[2, 3])];
    inputs.extend(params);
    let f = |v: &[Var]| {
        let out = RNN::from_params(2, 3, o, named(&names, &v[2..]))?.run(&v[0], Some(&v[1]))?;
        joined(&[&out.output, &out.h_n])
    };
    check_both("RNN bidirectional, unbatched, no bias", f, &inputs, 133);
}

#[test]
fn variable_lengths() {
    let o = RnnOptions::default().num_layers(2).bidirectional(true).dtype(DType::F64);
    let (names, params) = params_of(140, || LSTM::with_options(2, 2, o).unwrap().named_parameters());
    let mut inputs = vec![normal(141, &[4, 3, 2]), normal(142, &[4, 3, 2]), normal(143, &[4, 3, 2])];
    inputs.extend(params);
    let f = |v: &[Var]| {
        let lstm = LSTM::from_params(2, 2, o, named(&names, &v[3..]))?;
        let out = lstm.run_with_lengths(&v[0], &[2, 4, 1], Some((&v[1], &v[2])))?;
        joined(&[&out.output, &out.h_n, &out.c_n])
    };
    check_both("LSTM with lengths", f, &inputs, 144);

    let o = RnnOptions::default().bidirectional(true).batch_first(true).dtype(DType::F64);
    let (names, params) = params_of(150, || GRU::with_options(2, 2, o).unwrap().named_parameters());
    let mut inputs = vec![normal(151, &[3, 4, 2])];
    inputs.extend(params);
    let f = |v: &[Var]| {
        let out = GRU::from_params(2, 2, o, named(&names, &v[1..]))?.run_with_lengths(&v[0], &[3, 1, 2], None)?;
        joined(&[&out.output, &out.h_n])
    };
    check_both("GRU with lengths, batch_first", f, &inputs, 153);
}
