//! A traced function that reads a graph input as a plain tensor (token ids handed on as
//! `x.value()`, as the pretrained models and `Embedding` do) still reads the input: the
//! export is run on other ids than it was traced on, at the traced batch and, with a
//! dynamic batch, at another.

use ember_autograd::{Var, no_grad};
use ember_nn::{Embedding, Module};
use ember_onnx::{ExportOptions, export_bytes, export_fn_bytes};
use ember_tensor::{Result, Tensor};

fn ids(values: &[i64], shape: [usize; 2]) -> Result<Var> {
    Ok(Var::new(Tensor::from_vec(values.to_vec(), shape)?))
}

fn max_diff(a: &Var, b: &Var) -> Result<f64> {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.value().to_vec::<f32>()?, b.value().to_vec::<f32>()?);
    Ok(a.iter().zip(&b).map(|(x, y)| f64::from((x - y).abs())).fold(0.0, f64::max))
}

#[test]
fn an_embedding_export_reads_its_ids_at_any_batch() -> Result<()> {
    ember_tensor::manual_seed(3);
    let embedding = Embedding::new(10, 4)?;
    let traced = ids(&[1, 2, 3, 4, 5, 6], [2, 3])?;
    let bytes = export_bytes(&embedding, &traced, &ExportOptions::default().dynamic_batch(true))?;
    let back = ember_onnx::load_bytes(&bytes)?;
    for other in [ids(&[9, 8, 7, 0, 1, 2], [2, 3])?, ids(&[3, 3, 3, 5, 5, 5, 0, 9, 1], [3, 3])?] {
        let (got, want) = no_grad(|| Ok((back.forward(&other)?, embedding.forward(&other)?)))?;
        assert_eq!(max_diff(&got, &want)?, 0.0);
    }
    Ok(())
}

#[test]
fn an_input_read_as_a_tensor_of_its_own_shape_is_the_input() -> Result<()> {
    // `x.value()` wrapped again: a fresh leaf holding the input's storage.
    let f = |x: &[Var]| Ok(vec![Var::new(x[0].value()).mul_scalar(2.0)]);
    let traced = Var::new(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [1, 3])?);
    let bytes = export_fn_bytes(f, &[], &[traced], &ExportOptions::default())?;
    let back = ember_onnx::load_bytes(&bytes)?;
    let other = Var::new(Tensor::from_vec(vec![-1.0f32, 0.5, 4.0], [1, 3])?);
    let got = back.forward(&other)?;
    assert_eq!(got.value().to_vec::<f32>()?, vec![-2.0, 1.0, 8.0]);
    Ok(())
}
