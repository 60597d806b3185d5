//! The importer's operators that ember composes from its own `Var` operations (recurrent
//! cells, instance norm, einsum, cumsum, scatters and gathers, pad, split, trilu, negative
//! slices, the activations, 1-d convolutions) have the gradients of what they compute:
//! `gradcheck` of one-node graphs, every float input a graph input in `f64`.

use ember_autograd::{Var, gradcheck};
use ember_onnx::ir::{Attr, Graph, IntTensor, Node, ValueInfo};
use ember_tensor::{DType, Result, Tensor};

fn randn(shape: &[usize]) -> Tensor {
    Tensor::normal(shape, 0.0, 0.5, DType::F64).expect("normal")
}

/// `gradcheck` of the graph `node` with float graph inputs `floats` (named in order) and
/// integer constants `ints`; its outputs flattened and concatenated.
fn check(node: Node, floats: &[(&str, Tensor)], ints: &[(&str, IntTensor)]) -> Result<()> {
    check_with_constants(node, floats, ints, &[])
}

/// [`check`] with float constants too (initializers: no gradient is checked for them).
fn check_with_constants(
    node: Node,
    floats: &[(&str, Tensor)],
    ints: &[(&str, IntTensor)],
    constants: &[(&str, Tensor)],
) -> Result<()> {
    let mut g = Graph::new("gradcheck");
    for (n, t) in constants {
        g.initializers.push((n.to_string(), t.clone()));
    }
    g.inputs = floats.iter().map(|(n, _)| ValueInfo { name: n.to_string(), dtype: None, shape: None }).collect();
    for (n, t) in ints {
        g.initializers.push((n.to_string(), t.to_tensor()?));
    }
    g.outputs = node
        .outputs
        .iter()
        .filter(|o| !o.is_empty())
        .map(|o| ValueInfo { name: o.clone(), dtype: None, shape: None })
        .collect();
    let label = node.op_type.clone();
    g.nodes.push(node);
    let model = g.build()?;
    let inputs: Vec<Tensor> = floats.iter().map(|(_, t)| t.clone()).collect();
    gradcheck(
        |v| {
            let outs = model.run(&v.iter().collect::<Vec<_>>())?;
            let flat: Vec<Var> = outs.iter().map(|o| o.reshape([o.numel()])).collect::<Result<_>>()?;
            Var::cat(&flat.iter().collect::<Vec<_>>(), 0)
        },
        &inputs,
        1e-6,
        1e-7,
        1e-5,
    )
    .map_err(|e| ember_tensor::Error::invalid("gradcheck", format!("{label}: {e}")))
}

fn ints(shape: &[usize], data: &[i64]) -> IntTensor {
    IntTensor::new(shape.to_vec(), data.to_vec()).expect("ints")
}

fn s(v: &str) -> Attr {
    Attr::String(v.into())
}

#[test]
fn lstm_bidirectional_with_lengths_and_initial_states() -> Result<()> {
    let node = Node::new("lstm", "LSTM", &["x", "w", "r", "b", "lens", "h0", "c0"], &["y", "yh", "yc"])
        .with_attrs([("direction", s("bidirectional")), ("hidden_size", Attr::Int(2))]);
    let floats = [
        ("x", randn(&[3, 2, 3])),
        ("w", randn(&[2, 8, 3])),
        ("r", randn(&[2, 8, 2])),
        ("b", randn(&[2, 16])),
        ("h0", randn(&[2, 2, 2])),
        ("c0", randn(&[2, 2, 2])),
    ];
    check(node, &floats, &[("lens", ints(&[2], &[3, 2]))])
}

#[test]
fn gru_in_both_reset_forms_and_reverse() -> Result<()> {
    for lbr in [0, 1] {
        let node = Node::new("gru", "GRU", &["x", "w", "r", "b"], &["y", "yh"]).with_attrs([
            ("direction", s("reverse")),
            ("linear_before_reset", Attr::Int(lbr)),
            ("layout", Attr::Int(1)),
        ]);
        let floats =
            [("x", randn(&[2, 3, 3])), ("w", randn(&[1, 6, 3])), ("r", randn(&[1, 6, 2])), ("b", randn(&[1, 12]))];
        check(node, &floats, &[])?;
    }
    Ok(())
}

#[test]
fn rnn_with_relu() -> Result<()> {
    let node = Node::new("rnn", "RNN", &["x", "w", "r", "", "", "h0"], &["y", "yh"])
        .with_attrs([("activations", Attr::Strings(vec!["Relu".into()]))]);
    let floats =
        [("x", randn(&[3, 2, 3])), ("w", randn(&[1, 2, 3])), ("r", randn(&[1, 2, 2])), ("h0", randn(&[1, 2, 2]))];
    check(node, &floats, &[])
}

#[test]
fn instance_normalization() -> Result<()> {
    let node = Node::new("in", "InstanceNormalization", &["x", "s", "b"], &["y"]);
    check(node, &[("x", randn(&[2, 3, 4])), ("s", randn(&[3])), ("b", randn(&[3]))], &[])
}

#[test]
fn einsum_explicit_implicit_and_ellipsis() -> Result<()> {
    for (eq, a, b) in [
        ("bij,bjk->bik", vec![2, 2, 3], vec![2, 3, 2]),
        ("ij,jk", vec![2, 3], vec![3, 2]),
        ("...id,...jd->...ij", vec![2, 3, 2], vec![2, 2, 2]),
    ] {
        let node = Node::new("e", "Einsum", &["a", "b"], &["y"]).with_attrs([("equation", s(eq))]);
        check(node, &[("a", randn(&a)), ("b", randn(&b))], &[])?;
    }
    Ok(())
}

#[test]
fn cumsum_in_all_four_forms() -> Result<()> {
    for (exclusive, reverse) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let node = Node::new("c", "CumSum", &["x", "axis"], &["y"])
            .with_attrs([("exclusive", Attr::Int(exclusive)), ("reverse", Attr::Int(reverse))]);
        check(node, &[("x", randn(&[2, 4]))], &[("axis", IntTensor::scalar(1))])?;
    }
    Ok(())
}

#[test]
fn scatters_and_gathers() -> Result<()> {
    let nd = Node::new("s", "ScatterND", &["x", "i", "u"], &["y"]);
    check(nd, &[("x", randn(&[3, 2])), ("u", randn(&[2, 2]))], &[("i", ints(&[2, 1], &[2, 0]))])?;
    let el = Node::new("s", "ScatterElements", &["x", "i", "u"], &["y"]).with_attrs([("axis", Attr::Int(1))]);
    check(el, &[("x", randn(&[2, 3])), ("u", randn(&[2, 1]))], &[("i", ints(&[2, 1], &[1, -1]))])?;
    let gnd = Node::new("g", "GatherND", &["x", "i"], &["y"]);
    check(gnd, &[("x", randn(&[3, 2]))], &[("i", ints(&[2, 1], &[2, 2]))])?;
    let gel = Node::new("g", "GatherElements", &["x", "i"], &["y"]).with_attrs([("axis", Attr::Int(0))]);
    check(gel, &[("x", randn(&[3, 2]))], &[("i", ints(&[2, 2], &[0, 2, 1, 1]))])
}

#[test]
fn pad_split_trilu_and_negative_slices() -> Result<()> {
    let pad = Node::new("p", "Pad", &["x", "pads", "v"], &["y"]);
    // The padding value and the clip bounds are constants (exporters write them so).
    let v = [("v", Tensor::scalar(0.5f64))];
    check_with_constants(pad, &[("x", randn(&[2, 3]))], &[("pads", ints(&[4], &[1, -1, 0, 2]))], &v)?;
    let split = Node::new("s", "Split", &["x"], &["a", "b", "c"])
        .with_attrs([("axis", Attr::Int(1)), ("num_outputs", Attr::Int(3))]);
    check(split, &[("x", randn(&[2, 5]))], &[])?;
    let trilu = Node::new("t", "Trilu", &["x", "k"], &["y"]).with_attrs([("upper", Attr::Int(0))]);
    check(trilu, &[("x", randn(&[3, 3]))], &[("k", IntTensor::scalar(-1))])?;
    let slice = Node::new("s", "Slice", &["x", "st", "en", "ax", "sp"], &["y"]);
    let consts = [
        ("st", ints(&[1], &[-1])),
        ("en", ints(&[1], &[i64::MIN])),
        ("ax", ints(&[1], &[1])),
        ("sp", ints(&[1], &[-2])),
    ];
    check(slice, &[("x", randn(&[2, 5]))], &consts)
}

#[test]
fn activations_and_extremes() -> Result<()> {
    let x = || randn(&[2, 5]);
    let unary = [
        ("LeakyRelu", vec![("alpha", Attr::Float(0.1))]),
        ("HardSigmoid", vec![("alpha", Attr::Float(1.0 / 6.0)), ("beta", Attr::Float(0.5))]),
        ("Softplus", vec![]),
        ("Elu", vec![]),
        ("Gelu", vec![("approximate", s("tanh"))]),
        ("Gelu", vec![]),
        ("Sin", vec![]),
        ("Cos", vec![]),
    ];
    for (op, attrs) in unary {
        check(Node::new("a", op, &["x"], &["y"]).with_attrs(attrs), &[("x", x())], &[])?;
    }
    let clip = Node::new("c", "Clip", &["x", "lo", "hi"], &["y"]);
    let bounds = [("lo", Tensor::scalar(-0.3f64)), ("hi", Tensor::scalar(0.4f64))];
    check_with_constants(clip, &[("x", x())], &[], &bounds)?;
    check(Node::new("m", "Max", &["a", "b", "c"], &["y"]), &[("a", x()), ("b", x()), ("c", randn(&[5]))], &[])?;
    check(Node::new("m", "Min", &["a", "b"], &["y"]), &[("a", x()), ("b", x())], &[])?;
    let l2 = Node::new("r", "ReduceL2", &["x", "axes"], &["y"]).with_attrs([("keepdims", Attr::Int(0))]);
    check(l2, &[("x", x())], &[("axes", ints(&[1], &[1]))])
}

#[test]
fn one_d_convolutions() -> Result<()> {
    let conv = Node::new("c", "Conv", &["x", "w", "b"], &["y"]).with_attrs([
        ("kernel_shape", Attr::Ints(vec![3])),
        ("pads", Attr::Ints(vec![1, 2])),
        ("strides", Attr::Ints(vec![2])),
    ]);
    check(conv, &[("x", randn(&[1, 2, 5])), ("w", randn(&[3, 2, 3])), ("b", randn(&[3]))], &[])?;
    let up = Node::new("c", "ConvTranspose", &["x", "w"], &["y"])
        .with_attrs([("strides", Attr::Ints(vec![2])), ("output_padding", Attr::Ints(vec![1]))]);
    check(up, &[("x", randn(&[1, 2, 3])), ("w", randn(&[2, 1, 3]))], &[])?;
    let pool = Node::new("p", "AveragePool", &["x"], &["y"]).with_attrs([("kernel_shape", Attr::Ints(vec![2]))]);
    check(pool, &[("x", randn(&[1, 2, 6]))], &[])
}

#[test]
fn integer_inputs_stay_on_the_host() -> Result<()> {
    // Range and ConstantOfShape make integer values that index float ones.
    let mut g = Graph::new("host");
    g.inputs = vec![ValueInfo::new("x", DType::F32, &[Some(2), Some(4)])];
    g.outputs = vec![ValueInfo { name: "y".into(), dtype: None, shape: None }];
    g.initializers = vec![
        ("zero".into(), Tensor::scalar(0i64)),
        ("four".into(), Tensor::scalar(4i64)),
        ("two".into(), Tensor::scalar(2i64)),
    ];
    g.nodes = vec![
        Node::new("r", "Range", &["zero", "four", "two"], &["idx"]),
        Node::new("g", "Gather", &["x", "idx"], &["y"]).with_attrs([("axis", Attr::Int(1))]),
    ];
    let model = g.build()?;
    let x = Var::new(Tensor::from_vec((0..8).map(|v| v as f32).collect::<Vec<_>>(), [2, 4])?);
    let y = model.run(&[&x])?.remove(0);
    assert_eq!(y.value().to_vec::<f32>()?, vec![0.0, 2.0, 4.0, 6.0]);
    Ok(())
}
