//! `checkpoint_sequential`: bit-identical outputs and gradients against the model run
//! without checkpoints, for 1, 2 and as many segments as modules, with a dropout inside (the
//! generator is replayed) in training and in evaluation, and under create_graph; the
//! segment-count errors. Every test holds the seed guard: the generator is process-wide.

use ember_autograd::{Var, grad};
use ember_nn::{Dropout, Linear, LinearOptions, Module, ModuleSequence, ReLU, Sequential, Tanh, checkpoint_sequential};
use ember_tensor::{DType, Result, Tensor, manual_seed};
use std::sync::Arc;

fn linear(i: usize, o: usize) -> Linear {
    Linear::with_options(i, o, LinearOptions { bias: true, dtype: DType::F64 }).expect("a linear layer")
}

/// Six modules with a dropout in the middle.
fn model() -> Arc<Sequential> {
    Arc::new(
        Sequential::new()
            .add(linear(5, 8))
            .add(Tanh)
            .add(Dropout::new(0.3).expect("p"))
            .add(linear(8, 8))
            .add(ReLU)
            .add(linear(8, 3)),
    )
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec::<f64>().expect("f64").into_iter().map(f64::to_bits).collect()
}

/// The output, the parameters' gradients and the input's gradient, as bits.
type Run = (Vec<u64>, Vec<Vec<u64>>, Vec<u64>);

/// Runs `forward` on `x` after seeding the generator, backpropagates `loss` and collects
/// the results, leaving the gradients cleared.
fn run(
    model: &Arc<Sequential>,
    x: &Var,
    forward: impl Fn(&Var) -> Result<Var>,
    loss: impl Fn(&Var, &Var) -> Result<Var>,
) -> Result<Run> {
    manual_seed(77);
    let y = forward(x)?;
    loss(&y, x)?.backward()?;
    let grads = model.parameters().iter().map(|p| bits(&p.grad().expect("a parameter gradient"))).collect();
    let out = (bits(&y.value()), grads, bits(&x.grad().expect("an input gradient")));
    model.zero_grad();
    x.zero_grad();
    Ok(out)
}

fn squared_error(y: &Var, _: &Var) -> Result<Var> {
    Ok(y.sub_scalar(0.25).square().mean_all())
}

/// A gradient penalty on the input's gradient plus the output's mean: backward goes
/// through the recorded backward of every segment.
fn gradient_penalty(y: &Var, x: &Var) -> Result<Var> {
    let gx = grad(&[&y.sum_all()], &[x], &[], false, true)?[0].clone().expect("an input gradient");
    gx.square().sum(1, false)?.sqrt().sub_scalar(1.0).square().mean_all().add(&y.mean_all())
}

fn check_segment_counts(loss: fn(&Var, &Var) -> Result<Var>) -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(3);
    let model = model();
    let x = Var::param(Tensor::randn([4, 5])?.to_dtype(DType::F64));
    for training in [true, false] {
        model.set_training(training);
        let plain = run(&model, &x, |x| model.forward(x), loss)?;
        for segments in [1, 2, 3, model.len()] {
            let checkpointed = run(&model, &x, |x| checkpoint_sequential(&model, segments, x), loss)?;
            assert!(checkpointed.0 == plain.0, "output, {segments} segments, training {training}");
            assert!(checkpointed.1 == plain.1, "parameter gradients, {segments} segments, training {training}");
            assert!(checkpointed.2 == plain.2, "input gradient, {segments} segments, training {training}");
        }
    }
    Ok(())
}

#[test]
fn outputs_and_gradients_are_bit_identical_for_every_segment_count() -> Result<()> {
    check_segment_counts(squared_error)
}

#[test]
fn a_gradient_penalty_through_the_segments_is_bit_identical() -> Result<()> {
    check_segment_counts(gradient_penalty)
}

/// The dropout inside really drops (otherwise the replay would go untested): two runs with
/// different seeds differ.
#[test]
fn the_dropout_inside_draws_from_the_generator() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(4);
    let model = model();
    let x = Var::new(Tensor::randn([4, 5])?.to_dtype(DType::F64));
    manual_seed(1);
    let a = checkpoint_sequential(&model, 3, &x)?.value().to_vec::<f64>()?;
    manual_seed(2);
    let b = checkpoint_sequential(&model, 3, &x)?.value().to_vec::<f64>()?;
    assert_ne!(a, b);
    Ok(())
}

#[test]
fn a_list_of_modules_works_like_a_sequential() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(5);
    let layers: Vec<Box<dyn Module>> = vec![Box::new(linear(3, 4)), Box::new(Tanh), Box::new(linear(4, 2))];
    let list = Arc::new(layers);
    let x = Var::param(Tensor::randn([2, 3])?.to_dtype(DType::F64));
    let plain = list.iter().try_fold(x.clone(), |h, m| m.forward(&h))?;
    plain.sum_all().backward()?;
    let expected: Vec<Vec<u64>> = list.iter().flat_map(|m| m.parameters()).map(|p| bits(&p.grad().unwrap())).collect();
    list.iter().for_each(|m| m.zero_grad());
    let y = checkpoint_sequential(&list, 2, &x)?;
    assert_ne!(y.op_name(), "checkpoint", "the last segment runs without a checkpoint");
    assert_eq!(bits(&y.value()), bits(&plain.value()));
    y.sum_all().backward()?;
    let got: Vec<Vec<u64>> = list.iter().flat_map(|m| m.parameters()).map(|p| bits(&p.grad().unwrap())).collect();
    assert_eq!(got, expected);
    assert_eq!(list.module_count(), 3);
    Ok(())
}

#[test]
fn segments_out_of_range_are_errors_naming_the_numbers() -> Result<()> {
    let _rng = ember_testing::gradcheck::seed_guard(6);
    let model = model();
    let x = Var::new(Tensor::randn([4, 5])?.to_dtype(DType::F64));
    for segments in [0, 7] {
        let err = checkpoint_sequential(&model, segments, &x).unwrap_err().to_string();
        assert!(
            err.contains("checkpoint_sequential") && err.contains("(6)") && err.contains(&format!("got {segments}")),
            "{err}"
        );
    }
    let empty = Arc::new(Sequential::new());
    assert!(checkpoint_sequential(&empty, 1, &x).unwrap_err().to_string().contains("(0), got 1"));
    Ok(())
}
