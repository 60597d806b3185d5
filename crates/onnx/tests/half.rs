//! FLOAT16 and BFLOAT16 in ONNX files: initializers (`raw_data` and `int32_data`), graph
//! inputs and outputs, `Cast` to and from them, and the export of models whose parameters
//! are f16 or bf16, which import again with bit-identical outputs. With
//! `EMBER_WRITE_HALF_FIXTURES=1` the export is also written for
//! `tools/parity/half_formats.py check`, which runs it in ONNX Runtime.

use ember_autograd::Var;
use ember_io::StateDict;
use ember_nn::{Linear, LinearOptions, Module, ReLU, Sequential};
use ember_onnx::ExportOptions;
use ember_onnx::proto::{
    AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, TypeProtoTensor, ValueInfoProto, attribute_type, data_type,
};
use ember_tensor::{DType, Result, Tensor, bf16, f16};
use prost::Message;
use std::path::Path;

fn value(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    let shape = TensorShapeProto {
        dim: dims.iter().map(|&v| Dimension { dim_value: Some(v), ..Default::default() }).collect(),
    };
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor { elem_type, shape: Some(shape) }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str, to: Option<i32>) -> NodeProto {
    let attribute = to
        .map(|t| AttributeProto {
            name: "to".into(),
            r#type: attribute_type::INT,
            i: i64::from(t),
            ..Default::default()
        })
        .into_iter()
        .collect();
    NodeProto {
        name: format!("{op}_{output}"),
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute,
        ..Default::default()
    }
}

fn model(
    nodes: Vec<NodeProto>,
    initializer: Vec<TensorProto>,
    input: ValueInfoProto,
    output: Vec<ValueInfoProto>,
) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto { domain: String::new(), version: 17 }],
        graph: Some(GraphProto { node: nodes, initializer, input: vec![input], output, ..Default::default() }),
        ..Default::default()
    }
    .encode_to_vec()
}

const W: [f32; 6] = [0.1, -2.5, 1000.0, 3e-5, 0.7, -0.0];
const B: [f32; 3] = [1.0 / 3.0, -7.25, 3e38];

/// `y = Cast(Cast(x + w, FLOAT) * Cast(b, FLOAT))` into bf16 and f16, with `x` an f16 input,
/// `w` an f16 initializer in `raw_data` and `b` a bf16 one in `int32_data` (one bit
/// pattern per entry, ONNX's layout for both 16-bit types).
fn sixteen_bit_graph(b_values: Vec<i32>) -> Vec<u8> {
    let w = TensorProto {
        name: "w".into(),
        dims: vec![2, 3],
        data_type: data_type::FLOAT16,
        raw_data: W.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect(),
        ..Default::default()
    };
    let b = TensorProto {
        name: "b".into(),
        dims: vec![3],
        data_type: data_type::BFLOAT16,
        int32_data: b_values,
        ..Default::default()
    };
    let nodes = vec![
        node("Add", &["x", "w"], "a", None),
        node("Cast", &["a"], "a32", Some(data_type::FLOAT)),
        node("Cast", &["b"], "b32", Some(data_type::FLOAT)),
        node("Mul", &["a32", "b32"], "m", None),
        node("Cast", &["m"], "y_bf16", Some(data_type::BFLOAT16)),
        node("Cast", &["m"], "y_f16", Some(data_type::FLOAT16)),
    ];
    let outputs = vec![value("y_bf16", data_type::BFLOAT16, &[2, 3]), value("y_f16", data_type::FLOAT16, &[2, 3])];
    model(nodes, vec![w, b], value("x", data_type::FLOAT16, &[2, 3]), outputs)
}

fn b_bits() -> Vec<i32> {
    B.iter().map(|&v| i32::from(bf16::from_f32(v).to_bits())).collect()
}

#[test]
fn sixteen_bit_initializers_inputs_outputs_and_casts_import() -> Result<()> {
    let g = ember_onnx::load_bytes(&sixteen_bit_graph(b_bits()))?;
    assert_eq!(g.inputs()[0].dtype, Some(DType::F16));
    let x = [1.5f32, 2.0, -999.0, 0.25, -0.7, 65504.0];
    let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let ys = g.run(&[&Var::new(Tensor::from_vec(xh.clone(), [2, 3])?)])?;
    assert_eq!((ys[0].dtype(), ys[1].dtype()), (DType::BF16, DType::F16));
    // By hand: the f16 sum rounded once, then the f32 product, then each cast.
    let m: Vec<f32> = (0..6)
        .map(|i| {
            let a = f16::from_f32(xh[i].to_f32() + f16::from_f32(W[i]).to_f32());
            a.to_f32() * bf16::from_f32(B[i % 3]).to_f32()
        })
        .collect();
    assert_eq!(ys[0].value().to_vec::<bf16>()?, m.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>());
    assert_eq!(ys[1].value().to_vec::<f16>()?, m.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>());
    // -999 + 1000 times 3e38 overflows f16 and not bf16.
    assert!(ys[1].value().to_vec::<f16>()?[2].is_infinite() && ys[0].value().to_vec::<bf16>()?[2].is_finite());
    // The declared input dtype is enforced.
    let err = g.run(&[&Var::new(Tensor::from_vec(x.to_vec(), [2, 3])?)]).unwrap_err().to_string();
    assert!(err.contains("f16") && err.contains("f32"), "{err}");
    // A 16-bit initializer whose typed data does not fill its dims is refused, named.
    let err = ember_onnx::load_bytes(&sixteen_bit_graph(b_bits()[..2].to_vec())).err().map(|e| e.to_string());
    assert!(err.as_deref().is_some_and(|e| e.contains("initializer 'b'") && e.contains("2 values")), "{err:?}");
    Ok(())
}

/// A two-layer perceptron with parameters of `dtype`.
fn mlp(dtype: DType) -> Result<Sequential> {
    let options = LinearOptions { bias: true, dtype };
    let net =
        Sequential::new().add(Linear::with_options(4, 8, options)?).add(ReLU).add(Linear::with_options(8, 3, options)?);
    // Deterministic weights (tests run side by side; no shared generator).
    let state: StateDict = net
        .state_dict()
        .iter()
        .enumerate()
        .map(|(i, (k, t))| {
            let v: Vec<f32> = (0..t.numel()).map(|j| (((i * 31 + j * 17) % 23) as f32 - 11.0) / 9.0).collect();
            Ok((k.to_string(), Tensor::from_vec(v, t.shape().clone())?.to_dtype(dtype)))
        })
        .collect::<Result<_>>()?;
    net.load_state_dict(&state)?;
    Ok(net)
}

fn input(dtype: DType, rows: usize) -> Result<Tensor> {
    let v: Vec<f32> = (0..rows * 4).map(|k| ((k * 7) % 13) as f32 / 4.0 - 1.5).collect();
    Ok(Tensor::from_vec(v, [rows, 4])?.to_dtype(dtype))
}

#[test]
fn models_with_16_bit_parameters_export_and_import_bit_for_bit() -> Result<()> {
    for dtype in [DType::F16, DType::BF16] {
        let net = mlp(dtype)?;
        let options = ExportOptions::default().dynamic_batch(true);
        let bytes = ember_onnx::export_bytes(&net, &Var::new(input(dtype, 2)?), &options)?;
        let proto = ModelProto::decode(bytes.as_slice()).unwrap();
        let graph = proto.graph.as_ref().unwrap();
        let elem = if dtype == DType::F16 { data_type::FLOAT16 } else { data_type::BFLOAT16 };
        assert!(graph.initializer.iter().filter(|t| t.name.ends_with("weight")).all(|t| t.data_type == elem));
        let io_types = graph
            .input
            .iter()
            .chain(&graph.output)
            .map(|v| v.r#type.as_ref().unwrap().tensor_type.as_ref().unwrap().elem_type);
        assert!(io_types.into_iter().all(|t| t == elem), "{dtype}");
        let back = ember_onnx::load_bytes(&bytes)?;
        assert_eq!(back.parameters().iter().map(|p| p.dtype()).collect::<Vec<_>>(), vec![dtype; 4]);
        // Another batch size, through the dynamic batch.
        let x = Var::new(input(dtype, 5)?);
        let (want, got) = (net.forward(&x)?.value(), back.forward(&x)?.value());
        assert_eq!(got.dtype(), dtype);
        assert_eq!(got.to_vec_f64()?, want.to_vec_f64()?, "{dtype}");
        if dtype == DType::F16 && std::env::var_os("EMBER_WRITE_HALF_FIXTURES").is_some() {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/parity/fixtures/half");
            std::fs::write(dir.join("ember_mlp_f16.onnx"), &bytes).unwrap();
            let mut io = StateDict::new();
            io.insert("input", x.value());
            io.insert("output", want);
            ember_io::save_safetensors(dir.join("ember_mlp_f16_io.safetensors"), &io)?;
        }
    }
    Ok(())
}

#[test]
fn casts_between_16_bit_and_other_floats_export_and_import() -> Result<()> {
    // f16 in, scalar constants in f16, a bf16 detour and an f32 result: Cast nodes both ways.
    let f = |x: &[Var]| -> Result<Vec<Var>> {
        let y = x[0].mul_scalar(0.5).add_scalar(1.0).to_dtype(DType::BF16).to_dtype(DType::F32);
        Ok(vec![y])
    };
    let x = Var::new(input(DType::F16, 3)?);
    let bytes = ember_onnx::export_fn_bytes(f, &[], std::slice::from_ref(&x), &ExportOptions::default())?;
    let back = ember_onnx::load_bytes(&bytes)?;
    let got = back.run(&[&x])?.remove(0).value();
    let want = f(std::slice::from_ref(&x))?.remove(0).value();
    assert_eq!(got.dtype(), DType::F32);
    assert_eq!(got.to_vec::<f32>()?, want.to_vec::<f32>()?);
    Ok(())
}
