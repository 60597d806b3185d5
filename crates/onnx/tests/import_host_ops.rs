//! What PyTorch's exports of the pretrained models needed beyond the layers' operators:
//! `IsNaN`, as the exporters write it after attention's softmax (`Where(IsNaN(p), 0, p)`):
//! NaNs found wherever they are, the gradient of the pattern reaching the other elements,
//! an integer input refused with the node named; and `GatherElements` of host integers
//! (BERT's `token_type_ids` buffer): values, negative indices, a bad index or shape named.

use ember_autograd::{Var, gradcheck};
use ember_onnx::ir::{Attr, Graph, GraphModel, IntTensor, Node, ValueInfo};
use ember_tensor::{DType, Result, Tensor};

/// `y = Where(IsNaN(x), 0, x)` with `x` a graph input, or an integer initializer `x` with
/// `int_input`.
fn zero_nans(int_input: bool) -> Result<GraphModel> {
    let mut g = Graph::new("is_nan");
    if int_input {
        g.initializers.push(("x".into(), Tensor::from_vec(vec![1i64, 2, 3], [3])?));
    } else {
        g.inputs = vec![ValueInfo { name: "x".into(), dtype: None, shape: None }];
    }
    g.initializers.push(("zero".into(), Tensor::scalar(0.0f64)));
    g.nodes.push(Node::new("nan_mask", "IsNaN", &["x"], &["m"]));
    g.nodes.push(Node::new("zeroed", "Where", &["m", "zero", "x"], &["y"]));
    g.outputs = vec![ValueInfo { name: "y".into(), dtype: None, shape: None }];
    g.build()
}

#[test]
fn nans_are_found_in_a_strided_tensor_and_zeroed() -> Result<()> {
    let model = zero_nans(false)?;
    let values = vec![1.0, f64::NAN, -2.0, f64::INFINITY, f64::NAN, 0.5];
    // Transposed, so that the elements are read through strides.
    let x = Tensor::from_vec(values, [2, 3])?.permute(&[1, 0])?;
    let y = model.run(&[&Var::new(x)])?;
    assert_eq!(y[0].shape().dims(), &[3, 2]);
    assert_eq!(y[0].value().contiguous().to_vec::<f64>()?, vec![1.0, f64::INFINITY, 0.0, 0.0, -2.0, 0.5]);
    Ok(())
}

#[test]
fn the_gradient_of_the_pattern_reaches_the_other_elements() -> Result<()> {
    let model = zero_nans(false)?;
    let x = Tensor::normal([2, 3], 0.0, 1.0, DType::F64)?;
    gradcheck(|v| Ok(model.run(&[&v[0]])?.remove(0)), &[x], 1e-6, 1e-7, 1e-5)?;
    Ok(())
}

#[test]
fn an_integer_input_is_refused_naming_the_node() {
    let err = match zero_nans(true).and_then(|m| m.run(&[])) {
        Ok(_) => panic!("IsNaN of integers ran"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("nan_mask") && err.contains("IsNaN"), "{err}");
    assert!(err.contains("float"), "{err}");
}

/// `GatherElements(data, indices)` along `axis` of two integer initializers.
fn gather_ints(data: IntTensor, indices: IntTensor, axis: i64) -> Result<Vec<Var>> {
    let mut g = Graph::new("gather_ints");
    g.initializers.push(("data".into(), data.to_tensor()?));
    g.initializers.push(("indices".into(), indices.to_tensor()?));
    g.nodes.push(
        Node::new("token_types", "GatherElements", &["data", "indices"], &["y"])
            .with_attrs([("axis", Attr::Int(axis))]),
    );
    g.outputs = vec![ValueInfo { name: "y".into(), dtype: None, shape: None }];
    g.build()?.run(&[])
}

#[test]
fn gather_elements_of_integers_on_both_axes() -> Result<()> {
    let data = IntTensor::new(vec![2, 3], vec![10, 11, 12, 20, 21, 22])?;
    let y = gather_ints(data.clone(), IntTensor::new(vec![2, 2], vec![2, 0, -1, 1])?, 1)?;
    assert_eq!(y[0].shape().dims(), &[2, 2]);
    assert_eq!(y[0].value().to_vec::<i64>()?, vec![12, 10, 22, 21]);
    // Along axis 0, with fewer columns than the data has.
    let y = gather_ints(data, IntTensor::new(vec![1, 2], vec![1, 0])?, 0)?;
    assert_eq!(y[0].value().to_vec::<i64>()?, vec![20, 11]);
    Ok(())
}

#[test]
fn gather_elements_of_integers_refuses_a_bad_index_or_shape() {
    let data = IntTensor::new(vec![2, 3], vec![10, 11, 12, 20, 21, 22]).unwrap();
    let err = gather_ints(data.clone(), IntTensor::new(vec![1, 1], vec![3]).unwrap(), 1).err().unwrap().to_string();
    assert!(err.contains("token_types") && err.contains("out of range"), "{err}");
    let err = gather_ints(data, IntTensor::new(vec![3, 1], vec![0, 0, 0]).unwrap(), 1).err().unwrap().to_string();
    assert!(err.contains("GatherElements") && err.contains("[3, 1]"), "{err}");
    // 0-d data has no axis to gather along.
    let err = gather_ints(IntTensor::scalar(4), IntTensor::scalar(0), 0).err().unwrap().to_string();
    assert!(err.contains("GatherElements"), "{err}");
}
