//! The recurrent layers and cells as a user meets them: shapes in every layout, initial
//! states, parameter names and initialisation, dropout between layers, variable lengths,
//! and the errors for inputs and states that do not fit.

mod common;

use common::values;
use ember_autograd::Var;
use ember_nn::{CellOptions, GRU, GRUCell, LSTM, LSTMCell, Module, Nonlinearity, RNN, RNNCell, RnnOptions, Sequential};
use ember_tensor::{DType, Error, Tensor};

fn randn(shape: &[usize]) -> Var {
    Var::new(Tensor::randn(shape).unwrap())
}

fn max_abs_diff(a: &Var, b: &Var) -> f64 {
    values(a).iter().zip(values(b)).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn shapes_in_every_layout() {
    let _rng = ember_testing::gradcheck::seed_guard(10);
    let o = RnnOptions::default().num_layers(3).bidirectional(true);
    let lstm = LSTM::with_options(5, 7, o).unwrap();
    let out = lstm.run(&randn(&[4, 2, 5]), None).unwrap();
    assert_eq!(out.output.shape().dims(), &[4, 2, 14]);
    assert_eq!(out.h_n.shape().dims(), &[6, 2, 7]);
    assert_eq!(out.c_n.shape().dims(), &[6, 2, 7]);

    let gru = GRU::with_options(5, 7, o.batch_first(true)).unwrap();
    let out = gru.run(&randn(&[2, 4, 5]), None).unwrap();
    assert_eq!(out.output.shape().dims(), &[2, 4, 14]);
    assert_eq!(out.h_n.shape().dims(), &[6, 2, 7]);

    let rnn = RNN::new(5, 7).unwrap();
    let out = rnn.run(&randn(&[4, 5]), Some(&randn(&[1, 7]))).unwrap();
    assert_eq!(out.output.shape().dims(), &[4, 7]);
    assert_eq!(out.h_n.shape().dims(), &[1, 7]);

    let proj = LSTM::with_options(5, 7, RnnOptions::default().proj_size(3).num_layers(2)).unwrap();
    let out = proj.run(&randn(&[4, 2, 5]), None).unwrap();
    assert_eq!(out.output.shape().dims(), &[4, 2, 3]);
    assert_eq!(out.h_n.shape().dims(), &[2, 2, 3]);
    assert_eq!(out.c_n.shape().dims(), &[2, 2, 7]);

    // Module::forward gives the output, so a recurrent layer fits in a Sequential.
    let model = Sequential::new().add(LSTM::new(5, 7).unwrap());
    assert_eq!(model.forward(&randn(&[4, 2, 5])).unwrap().shape().dims(), &[4, 2, 7]);
}

#[test]
fn batch_first_and_unbatched_match_the_time_major_layout() {
    let _rng = ember_testing::gradcheck::seed_guard(11);
    let lstm = LSTM::with_options(3, 4, RnnOptions::default().bidirectional(true)).unwrap();
    let lstm_bf = LSTM::with_options(3, 4, RnnOptions::default().bidirectional(true).batch_first(true)).unwrap();
    lstm_bf.load_state_dict(&lstm.state_dict()).unwrap();
    let x = randn(&[5, 2, 3]);
    let a = lstm.run(&x, None).unwrap();
    let b = lstm_bf.run(&x.transpose(0, 1).unwrap(), None).unwrap();
    assert!(max_abs_diff(&a.output, &b.output.transpose(0, 1).unwrap()) < 1e-6);
    assert!(max_abs_diff(&a.h_n, &b.h_n) < 1e-6);

    // The second sequence alone, unbatched.
    let one = lstm.run(&x.select(1, 1).unwrap(), None).unwrap();
    assert!(max_abs_diff(&one.output, &a.output.select(1, 1).unwrap()) < 1e-6);
    assert!(max_abs_diff(&one.c_n, &a.c_n.select(1, 1).unwrap()) < 1e-6);
}

#[test]
fn initial_states_are_used() {
    let _rng = ember_testing::gradcheck::seed_guard(12);
    let gru = GRU::with_options(3, 4, RnnOptions::default().num_layers(2)).unwrap();
    let x = randn(&[3, 2, 3]);
    let zeros = Var::new(Tensor::zeros([2, 2, 4], DType::F32).unwrap());
    let from_none = gru.run(&x, None).unwrap();
    let from_zeros = gru.run(&x, Some(&zeros)).unwrap();
    assert_eq!(values(&from_none.output), values(&from_zeros.output));
    let from_h0 = gru.run(&x, Some(&randn(&[2, 2, 4]))).unwrap();
    assert!(max_abs_diff(&from_none.output, &from_h0.output) > 1e-3);
}

#[test]
fn state_dict_names_and_shapes_follow_pytorch() {
    let _rng = ember_testing::gradcheck::seed_guard(13);
    let o = RnnOptions::default().num_layers(2).bidirectional(true).proj_size(2);
    let lstm = LSTM::with_options(3, 4, o).unwrap();
    let sd = lstm.state_dict();
    let got: Vec<(String, Vec<usize>)> = sd.iter().map(|(k, t)| (k.to_string(), t.shape().dims().to_vec())).collect();
    let mut expected = Vec::new();
    for (layer, input) in [(0, 3), (1, 4)] {
        for suffix in ["", "_reverse"] {
            let s = format!("_l{layer}{suffix}");
            expected.push((format!("weight_ih{s}"), vec![16, input]));
            expected.push((format!("weight_hh{s}"), vec![16, 2]));
            expected.push((format!("bias_ih{s}"), vec![16]));
            expected.push((format!("bias_hh{s}"), vec![16]));
            expected.push((format!("weight_hr{s}"), vec![2, 4]));
        }
    }
    assert_eq!(got, expected);

    let gru = GRU::with_options(3, 4, RnnOptions::default().bias(false)).unwrap();
    assert_eq!(gru.state_dict().keys().collect::<Vec<_>>(), ["weight_ih_l0", "weight_hh_l0"]);
    let cell = GRUCell::new(3, 4).unwrap();
    assert_eq!(cell.state_dict().keys().collect::<Vec<_>>(), ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]);
    assert_eq!(cell.weight_ih().shape().dims(), &[12, 3]);
}

#[test]
fn parameters_are_uniform_within_one_over_sqrt_hidden() {
    let _rng = ember_testing::gradcheck::seed_guard(3);
    let lstm = LSTM::with_options(10, 16, RnnOptions::default().num_layers(2)).unwrap();
    let bound = 1.0 / 4.0;
    for (name, p) in lstm.named_parameters() {
        let v = values(&p);
        assert!(v.iter().all(|x| x.abs() <= bound), "{name} exceeds 1/sqrt(hidden)");
        let spread = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        assert!(spread > 0.8 * bound, "{name} does not fill its range: max |w| = {spread}");
    }
}

#[test]
fn dropout_between_layers_only_in_training() {
    let _rng = ember_testing::gradcheck::seed_guard(14);
    let lstm = LSTM::with_options(3, 8, RnnOptions::default().num_layers(2).dropout(0.5)).unwrap();
    let x = randn(&[4, 2, 3]);
    lstm.eval();
    let a = lstm.run(&x, None).unwrap();
    let b = lstm.run(&x, None).unwrap();
    assert_eq!(values(&a.output), values(&b.output));
    lstm.train();
    let c = lstm.run(&x, None).unwrap();
    assert!(max_abs_diff(&a.output, &c.output) > 1e-4, "dropout changed nothing in training");

    // With one layer there is nothing to drop between.
    let single = LSTM::with_options(3, 8, RnnOptions::default().dropout(0.5)).unwrap();
    let d = single.run(&x, None).unwrap();
    single.eval();
    assert_eq!(values(&d.output), values(&single.run(&x, None).unwrap().output));
}

#[test]
fn padded_steps_change_nothing() {
    let _rng = ember_testing::gradcheck::seed_guard(15);
    let o = RnnOptions::default().num_layers(2).bidirectional(true);
    let lstm = LSTM::with_options(3, 4, o).unwrap();
    let x = randn(&[6, 3, 3]);
    let lengths = [4, 6, 2];
    let batch = lstm.run_with_lengths(&x, &lengths, None).unwrap();
    // Padding with other values gives the same result.
    let noise = randn(&[6, 3, 3]);
    let keep: Vec<f32> = (0..6).flat_map(|t| lengths.iter().map(move |&n| if t < n { 1.0 } else { 0.0 })).collect();
    let keep = Var::new(Tensor::from_vec(keep, [6, 3, 1]).unwrap());
    let x2 = x.mul(&keep).unwrap().add(&noise.mul(&keep.neg().add_scalar(1.0)).unwrap()).unwrap();
    let batch2 = lstm.run_with_lengths(&x2, &lengths, None).unwrap();
    assert!(max_abs_diff(&batch.output, &batch2.output) < 1e-6);
    assert!(max_abs_diff(&batch.h_n, &batch2.h_n) < 1e-6);

    for (b, &n) in lengths.iter().enumerate() {
        let alone = lstm.run(&x.narrow(0, 0, n).unwrap().narrow(1, b, 1).unwrap(), None).unwrap();
        let out = batch.output.narrow(1, b, 1).unwrap();
        assert!(max_abs_diff(&alone.output, &out.narrow(0, 0, n).unwrap()) < 1e-6, "sequence {b}");
        assert!(max_abs_diff(&alone.h_n, &batch.h_n.narrow(1, b, 1).unwrap()) < 1e-6, "h_n of sequence {b}");
        assert!(max_abs_diff(&alone.c_n, &batch.c_n.narrow(1, b, 1).unwrap()) < 1e-6, "c_n of sequence {b}");
        if n < 6 {
            assert!(values(&out.narrow(0, n, 6 - n).unwrap()).iter().all(|&v| v == 0.0), "padding of {b} not zero");
        }
    }

    // Full lengths are the plain run.
    let full = lstm.run_with_lengths(&x, &[6, 6, 6], None).unwrap();
    assert_eq!(values(&full.output), values(&lstm.run(&x, None).unwrap().output));
}

#[test]
fn cells_step_like_one_layer() {
    let _rng = ember_testing::gradcheck::seed_guard(5);
    let lstm = LSTM::new(3, 4).unwrap();
    let cell = LSTMCell::new(3, 4).unwrap();
    let sd = lstm.state_dict();
    let mut cell_sd = ember_nn::StateDict::new();
    for (k, t) in sd.iter() {
        cell_sd.insert(k.trim_end_matches("_l0"), t.clone());
    }
    cell.load_state_dict(&cell_sd).unwrap();
    let x = randn(&[3, 2, 3]);
    let out = lstm.run(&x, None).unwrap();
    let mut state = None;
    for t in 0..3 {
        state = Some(cell.run(&x.select(0, t).unwrap(), state.as_ref()).unwrap());
    }
    let state = state.unwrap();
    assert!(max_abs_diff(&state.h, &out.h_n.select(0, 0).unwrap()) < 1e-6);
    assert!(max_abs_diff(&state.c, &out.c_n.select(0, 0).unwrap()) < 1e-6);

    let relu = RNNCell::with_options(3, 4, CellOptions::default().nonlinearity(Nonlinearity::Relu)).unwrap();
    let h = relu.run(&randn(&[2, 3]), None).unwrap();
    assert!(values(&h).iter().all(|&v| v >= 0.0));
    assert_eq!(format!("{relu:?}"), "RNNCell(3, 4, nonlinearity='relu')");
    assert_eq!(GRUCell::new(3, 4).unwrap().forward(&randn(&[3])).unwrap().shape().dims(), &[4]);
}

#[test]
fn reprs_follow_pytorch() {
    let _rng = ember_testing::gradcheck::seed_guard(16);
    let o = RnnOptions::default().num_layers(2).batch_first(true).dropout(0.25).bidirectional(true);
    assert_eq!(
        format!("{:?}", LSTM::with_options(10, 20, o.proj_size(5)).unwrap()),
        "LSTM(10, 20, proj_size=5, num_layers=2, batch_first=True, dropout=0.25, bidirectional=True)"
    );
    assert_eq!(
        format!("{:?}", GRU::with_options(3, 4, RnnOptions::default().bias(false)).unwrap()),
        "GRU(3, 4, bias=False)"
    );
    assert_eq!(format!("{:?}", LSTMCell::new(3, 4).unwrap()), "LSTMCell(3, 4)");
}

#[track_caller]
fn shape_error(r: ember_tensor::Result<impl Sized>, op: &str, contains: &[&str]) {
    match r {
        Err(e @ Error::Shape { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(op), "{msg:?} does not name {op}");
            for c in contains {
                assert!(msg.contains(c), "{msg:?} does not contain {c:?}");
            }
        }
        Err(e) => panic!("expected a shape error, got {e}"),
        Ok(_) => panic!("expected a shape error, got a result"),
    }
}

#[test]
fn errors_name_the_layer_and_the_shapes() {
    let _rng = ember_testing::gradcheck::seed_guard(17);
    let lstm = LSTM::with_options(3, 4, RnnOptions::default().num_layers(2)).unwrap();
    shape_error(lstm.run(&randn(&[5, 2, 6]), None), "LSTM", &["3", "[5, 2, 6]"]);
    shape_error(lstm.run(&randn(&[2, 5, 2, 3]), None), "LSTM", &["[2, 5, 2, 3]"]);
    let (h0, c0) = (randn(&[1, 2, 4]), randn(&[2, 2, 4]));
    shape_error(lstm.run(&randn(&[5, 2, 3]), Some((&h0, &c0))), "LSTM", &["h0", "[2, 2, 4]", "[1, 2, 4]"]);
    let (h0, c0) = (randn(&[2, 2, 4]), randn(&[2, 3, 4]));
    shape_error(lstm.run(&randn(&[5, 2, 3]), Some((&h0, &c0))), "LSTM", &["c0", "[2, 2, 4]", "[2, 3, 4]"]);
    // Unbatched input with a batched state.
    let gru = GRU::new(3, 4).unwrap();
    shape_error(gru.run(&randn(&[5, 3]), Some(&randn(&[1, 1, 4]))), "GRU", &["[1, 4]", "[1, 1, 4]"]);
    shape_error(gru.run_with_lengths(&randn(&[5, 2, 3]), &[5], None), "GRU", &["1 lengths", "2 sequences"]);
    assert!(matches!(gru.run_with_lengths(&randn(&[5, 2, 3]), &[5, 6], None), Err(Error::InvalidArgument { .. })));
    assert!(matches!(gru.run_with_lengths(&randn(&[5, 2, 3]), &[0, 5], None), Err(Error::InvalidArgument { .. })));
    let cell = LSTMCell::new(3, 4).unwrap();
    shape_error(cell.run(&randn(&[2, 5]), None), "LSTMCell", &["[2, 5]"]);
    let bad = ember_nn::LstmState { h: randn(&[3, 4]), c: randn(&[2, 4]) };
    shape_error(cell.run(&randn(&[2, 3]), Some(&bad)), "LSTMCell", &["hx", "[2, 4]", "[3, 4]"]);
    let x64 = Var::new(Tensor::zeros([5, 2, 3], DType::F64).unwrap());
    assert!(matches!(gru.run(&x64, None), Err(Error::DType { .. })));
}

#[test]
fn bad_options_are_refused() {
    let _rng = ember_testing::gradcheck::seed_guard(18);
    let invalid = |r: ember_tensor::Result<GRU>| assert!(matches!(r, Err(Error::InvalidArgument { .. })));
    invalid(GRU::with_options(3, 4, RnnOptions::default().proj_size(2)));
    invalid(GRU::with_options(3, 4, RnnOptions::default().num_layers(0)));
    invalid(GRU::with_options(3, 4, RnnOptions::default().dropout(1.5)));
    invalid(GRU::with_options(3, 0, RnnOptions::default()));
    invalid(GRU::with_options(3, 4, RnnOptions::default().nonlinearity(Nonlinearity::Relu)));
    assert!(LSTM::with_options(3, 4, RnnOptions::default().proj_size(4)).is_err());
    assert!(RNN::with_options(3, 4, RnnOptions::default().dtype(DType::I64)).is_err());
    let named = GRU::new(3, 4).unwrap().named_parameters();
    assert!(GRU::from_params(3, 4, RnnOptions::default(), named[..3].to_vec()).is_err());
    assert!(GRU::from_params(3, 5, RnnOptions::default(), named).is_err());
}
