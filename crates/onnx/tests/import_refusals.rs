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
