//! The operators and attributes that ember's ONNX export added to the importer refuse what
//! they do not support with errors naming the node and the reason.

use ember_onnx::proto::{
    AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, TypeProtoTensor, ValueInfoProto, attribute_type, data_type,
};
use prost::Message;

fn value(name: &str, dims: Option<&[i64]>) -> ValueInfoProto {
    let shape = dims.map(|d| TensorShapeProto {
        dim: d.iter().map(|&v| Dimension { dim_value: Some(v), ..Default::default() }).collect(),
    });
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor { elem_type: data_type::FLOAT, shape }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::STRING, s: v.as_bytes().to_vec(), ..Default::default() }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::INTS, ints: v.to_vec(), ..Default::default() }
}

fn floats(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        raw_data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    }
}

/// The error of loading a one-node model on an input `x` of shape `[1, 2, 4, 4]` (checked
/// at load time).
fn load_err(node: NodeProto, initializer: Vec<TensorProto>) -> String {
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        graph: Some(GraphProto {
            node: vec![node],
            initializer,
            input: vec![value("x", Some(&[1, 2, 4, 4]))],
            output: vec![value("y", None)],
            ..Default::default()
        }),
        ..Default::default()
    };
    match ember_onnx::load_bytes(&model.encode_to_vec()) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

fn node(name: &str, op: &str, inputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        name: name.into(),
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec!["y".into()],
        attribute,
        ..Default::default()
    }
}

#[test]
fn resize_refuses_modes_and_coordinates_other_than_pytorchs() {
    let scales = || vec![floats("scales", &[4], &[1.0, 1.0, 2.0, 2.0])];
    let cubic = node("up", "Resize", &["x", "", "scales"], vec![string("mode", "cubic")]);
    let err = load_err(cubic, scales());
    assert!(err.contains("'up'") && err.contains("cubic"), "{err}");
    let rounding = vec![string("coordinate_transformation_mode", "asymmetric")];
    let err = load_err(node("near", "Resize", &["x", "", "scales"], rounding), scales());
    assert!(err.contains("'near'") && err.contains("round_prefer_floor"), "{err}");
    let batch = vec![floats("scales", &[4], &[2.0, 1.0, 2.0, 2.0])];
    let attrs = vec![string("mode", "linear")];
    let err = load_err(node("lin", "Resize", &["x", "", "scales"], attrs), batch);
    assert!(err.contains("'lin'") && err.contains("scales [1, 1, ..]"), "{err}");
    // What the exporter writes loads.
    let ok = vec![string("mode", "linear"), string("coordinate_transformation_mode", "pytorch_half_pixel")];
    assert_eq!(load_err(node("fine", "Resize", &["x", "", "scales"], ok), scales()), "");
}

#[test]
fn conv_transpose_refuses_output_shape_and_uneven_pads() {
    let w = || vec![floats("w", &[2, 3, 3, 3], &[0.5; 54])];
    let shape = vec![ints("output_shape", &[9, 9])];
    let err = load_err(node("up", "ConvTranspose", &["x", "w"], shape), w());
    assert!(err.contains("'up'") && err.contains("output_shape"), "{err}");
    let pads = vec![ints("pads", &[0, 0, 1, 1])];
    let err = load_err(node("padded", "ConvTranspose", &["x", "w"], pads), w());
    assert!(err.contains("'padded'") && err.contains("pads"), "{err}");
    let ok = vec![ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1]), ints("output_padding", &[1, 1])];
    assert_eq!(load_err(node("fine", "ConvTranspose", &["x", "w"], ok), w()), "");
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto { name: name.into(), r#type: attribute_type::INT, i: v, ..Default::default() }
}

fn int64s(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: data_type::INT64,
        raw_data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    }
}

#[test]
fn the_new_operators_name_the_node_and_what_they_refuse() {
    // x is [1, 2, 4, 4]; each case is (node, initializers, words the error must hold).
    let lstm_w = || vec![floats("w", &[1, 8, 4], &[0.1; 32]), floats("r", &[1, 8, 2], &[0.1; 16])];
    let cases: Vec<(NodeProto, Vec<TensorProto>, &[&str])> = vec![
        (
            node(
                "seq",
                "LSTM",
                &["x3", "w", "r"],
                vec![AttributeProto { r#type: attribute_type::FLOAT, f: 3.0, ..string("clip", "") }],
            ),
            lstm_w(),
            &["'seq' (LSTM)", "clip"],
        ),
        (
            node("pad", "Pad", &["x", "p"], vec![string("mode", "reflect")]),
            vec![int64s("p", &[8], &[0; 8])],
            &["'pad' (Pad)", "reflect"],
        ),
        (
            node("diag", "Einsum", &["x"], vec![string("equation", "bcii->bci")]),
            vec![],
            &["'diag' (Einsum)", "diagonal"],
        ),
        (node("gelu", "Gelu", &["x"], vec![string("approximate", "sigmoid")]), vec![], &["'gelu' (Gelu)", "sigmoid"]),
        (
            node("sc", "ScatterND", &["x", "i", "x"], vec![string("reduction", "add")]),
            vec![int64s("i", &[1, 1], &[0])],
            &["'sc' (ScatterND)", "add"],
        ),
        (
            node("split", "Split", &["x", "s"], vec![int("axis", 1)]),
            vec![int64s("s", &[1], &[3])],
            &["'split' (Split)", "summing to 2"],
        ),
        (
            node("gn", "GatherND", &["x", "i"], vec![int("batch_dims", 1)]),
            vec![int64s("i", &[1, 1], &[0])],
            &["'gn'", "batch_dims"],
        ),
        (
            node("odd", "LSTM", &["x", "w", "r"], vec![string("direction", "sideways")]),
            lstm_w(),
            &["'odd' (LSTM)", "sideways"],
        ),
    ];
    for (n, init, words) in cases {
        // The LSTM cases read a 3-d sequence made from x.
        let (n, init) = if n.input.first().is_some_and(|i| i == "x3") {
            let mut init = init;
            init.push(int64s("shape3", &[3], &[4, 2, 4]));
            let reshape = NodeProto { output: vec!["x3".into()], ..node("r3", "Reshape", &["x", "shape3"], vec![]) };
            (vec![reshape, n], init)
        } else {
            (vec![n], init)
        };
        let err = load_graph_err(n, init);
        assert!(words.iter().all(|w| err.contains(w)), "expected {words:?} in {err:?}");
    }
}

/// [`load_err`] for several nodes.
fn load_graph_err(nodes: Vec<NodeProto>, initializer: Vec<TensorProto>) -> String {
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 18 }],
        graph: Some(GraphProto {
            node: nodes,
            initializer,
            input: vec![value("x", Some(&[1, 2, 4, 4]))],
            output: vec![value("y", None)],
            ..Default::default()
        }),
        ..Default::default()
    };
    match ember_onnx::load_bytes(&model.encode_to_vec()) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}
