//! Corrupt and hostile files give errors naming what is wrong: never a panic, an abort or
//! an allocation sized by a lying header.

use ember_onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TypeProto, TypeProtoTensor, ValueInfoProto, attribute_type, data_type,
};
use ember_tensor::Result;
use prost::Message;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures").join(name)
}

fn input(name: &str) -> ValueInfoProto {
    let tensor_type = TypeProtoTensor { elem_type: data_type::FLOAT, shape: None };
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto { tensor_type: Some(tensor_type), ..Default::default() }),
        ..Default::default()
    }
}

fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: name.into(),
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model(nodes: Vec<NodeProto>, initializer: Vec<TensorProto>) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        graph: Some(GraphProto {
            node: nodes,
            initializer,
            input: vec![input("x")],
            output: vec![input("y")],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn load_err(m: &ModelProto) -> String {
    match ember_onnx::load_bytes(&m.encode_to_vec()) {
        Ok(_) => panic!("a broken model loaded"),
        Err(e) => e.to_string(),
    }
}

fn weight(dims: Vec<i64>, raw: Vec<u8>) -> TensorProto {
    TensorProto { name: "w".into(), dims, data_type: data_type::FLOAT, raw_data: raw, ..Default::default() }
}

#[test]
fn every_truncation_of_a_real_model_is_an_error() -> Result<()> {
    let bytes = std::fs::read(fixture("onnx_cnn.onnx")).map_err(|e| ember_tensor::Error::io("fixture", e))?;
    assert!(ember_onnx::load_bytes(&bytes).is_ok());
    for len in (0..bytes.len()).step_by(7) {
        // A prefix that happens to end on a field boundary may still parse; it must then
        // fail to build (missing nodes or weights), or run: never panic.
        let _ = ember_onnx::load_bytes(&bytes[..len]);
    }
    let err = ember_onnx::load_bytes(&bytes[..bytes.len() / 2]).unwrap_err().to_string();
    assert!(
        err.contains("not a valid ONNX protobuf") || err.contains("initializer") || err.contains("defined"),
        "{err}"
    );
    Ok(())
}

#[test]
fn flipped_bytes_never_panic() {
    let bytes = std::fs::read(fixture("onnx_cnn.onnx")).expect("fixture");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..300 {
        let mut b = bytes.clone();
        for _ in 0..4 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = (state % b.len() as u64) as usize;
            b[at] ^= (state >> 32) as u8 | 1;
        }
        let _ = ember_onnx::load_bytes(&b);
    }
}

#[test]
fn wrong_wire_type_is_an_error() {
    // Field 7 (graph, a message) written as a varint.
    let err = ember_onnx::load_bytes(&[0x08, 0x08, 0x38, 0x01]).unwrap_err().to_string();
    assert!(err.contains("not a valid ONNX protobuf"), "{err}");
}

#[test]
fn a_length_beyond_the_file_is_an_error() {
    // Field 7 claiming 2^40 bytes.
    let err = ember_onnx::load_bytes(&[0x3a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20]).unwrap_err().to_string();
    assert!(err.contains("not a valid ONNX protobuf"), "{err}");
}

#[test]
fn huge_dims_are_refused_before_allocating() {
    let m = model(vec![node("mm", "MatMul", &["x", "w"], &["y"])], vec![weight(vec![1 << 30, 1 << 30], vec![])]);
    let err = load_err(&m);
    assert!(err.contains("initializer 'w'") && err.contains("need"), "{err}");
    let m = model(vec![node("mm", "MatMul", &["x", "w"], &["y"])], vec![weight(vec![1 << 62, 1 << 62], vec![0; 4])]);
    assert!(load_err(&m).contains("overflow"));
    let m = model(vec![node("mm", "MatMul", &["x", "w"], &["y"])], vec![weight(vec![-3], vec![])]);
    assert!(load_err(&m).contains("negative dimension"));
}

#[test]
fn raw_data_that_lies_about_its_length_is_an_error() {
    let m = model(vec![node("mm", "MatMul", &["x", "w"], &["y"])], vec![weight(vec![10], vec![0; 4])]);
    let err = load_err(&m);
    assert!(err.contains("raw_data has 4 bytes") && err.contains("40"), "{err}");
}

#[test]
fn missing_inputs_and_cycles_name_the_node() {
    let err = load_err(&model(vec![node("first", "Relu", &["nowhere"], &["y"])], vec![]));
    assert!(err.contains("node 'first' (Relu)") && err.contains("'nowhere'"), "{err}");
    let cycle = vec![
        node("a", "Add", &["x", "b_out"], &["a_out"]),
        node("b", "Relu", &["a_out"], &["b_out"]),
        node("c", "Relu", &["a_out"], &["y"]),
    ];
    let err = load_err(&model(cycle, vec![]));
    assert!(err.contains("cycle"), "{err}");
    let twice = vec![node("a", "Relu", &["x"], &["y"]), node("b", "Relu", &["x"], &["y"])];
    assert!(load_err(&model(twice, vec![])).contains("already defined"));
}

#[test]
fn unknown_operators_and_attributes_are_refused() {
    // LSTM, this test's unknown operator until the importer learnt it, is supported now.
    let err = load_err(&model(vec![node("nms0", "NonMaxSuppression", &["x"], &["y"])], vec![]));
    assert!(err.contains("node 'nms0' (NonMaxSuppression)") && err.contains("unsupported operator"), "{err}");
    let mut n = node("sm", "Softmax", &["x"], &["y"]);
    n.attribute.push(AttributeProto { name: "weird".into(), r#type: attribute_type::INT, i: 1, ..Default::default() });
    let err = load_err(&model(vec![n], vec![]));
    assert!(err.contains("node 'sm' (Softmax)") && err.contains("'weird'"), "{err}");
    let mut n = node("sm", "Softmax", &["x"], &["y"]);
    n.attribute.push(AttributeProto { name: "axis".into(), r#type: attribute_type::GRAPH, ..Default::default() });
    assert!(load_err(&model(vec![n], vec![])).contains("sub-graph"));
}

#[test]
fn unsupported_opsets_are_refused() {
    let mut m = model(vec![node("r", "Relu", &["x"], &["y"])], vec![]);
    m.opset_import[0].version = 9;
    assert!(load_err(&m).contains("opset 9 is not supported"));
}

#[test]
fn missing_external_data_is_an_error() -> Result<()> {
    let mut w = weight(vec![4], vec![]);
    w.data_location = 1;
    w.external_data = vec![StringStringEntryProto { key: "location".into(), value: "weights.bin".into() }];
    let m = model(vec![node("mm", "Mul", &["x", "w"], &["y"])], vec![w]);
    assert!(load_err(&m).contains("cannot be read from bytes"));
    let dir = std::env::temp_dir().join(format!("ember_onnx_external_{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ember_tensor::Error::io(&dir, e))?;
    let path = dir.join("model.onnx");
    std::fs::write(&path, m.encode_to_vec()).map_err(|e| ember_tensor::Error::io(&path, e))?;
    let err = ember_onnx::load(&path).unwrap_err().to_string();
    assert!(err.contains("weights.bin"), "{err}");
    // Present but too short.
    std::fs::write(dir.join("weights.bin"), [0u8; 8]).map_err(|e| ember_tensor::Error::io(&dir, e))?;
    let err = ember_onnx::load(&path).unwrap_err().to_string();
    assert!(err.contains("holds 8 bytes") && err.contains("16"), "{err}");
    // The right size: it loads and runs.
    std::fs::write(dir.join("weights.bin"), 2.0f32.to_le_bytes().repeat(4))
        .map_err(|e| ember_tensor::Error::io(&dir, e))?;
    let model = ember_onnx::load(&path)?;
    let y = model.run(&[&ember_autograd::Var::new(ember_tensor::Tensor::ones([4], ember_tensor::DType::F32)?)])?;
    assert_eq!(y[0].value().to_vec::<f32>()?, vec![2.0; 4]);
    std::fs::remove_dir_all(&dir).map_err(|e| ember_tensor::Error::io(&dir, e))?;
    Ok(())
}

#[test]
fn shapes_that_do_not_fit_are_found_at_load_naming_the_node() {
    let mut m = model(vec![node("proj", "MatMul", &["x", "w"], &["y"])], vec![weight(vec![3, 2], vec![0; 24])]);
    let dims = [None, Some(4)].map(|d: Option<i64>| ember_onnx::proto::Dimension {
        dim_value: d,
        dim_param: d.is_none().then(|| "batch".to_string()),
        ..Default::default()
    });
    if let Some(g) = m.graph.as_mut()
        && let Some(t) = g.input[0].r#type.as_mut().and_then(|t| t.tensor_type.as_mut())
    {
        t.shape = Some(ember_onnx::proto::TensorShapeProto { dim: dims.to_vec() });
    }
    let err = load_err(&m);
    assert!(err.contains("node 'proj' (MatMul)"), "{err}");
}
