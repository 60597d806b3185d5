//! Prints tensors in ember's format (docs/design.md, 'Print format'): a 4-d tensor as 2-d
//! slices in memory order, then a 0-d, a 1-d and a 2-d tensor.
//!
//! ```text
//! cargo run --example print_tensor
//! ```

use ember::{DType, Result, Tensor};

fn main() -> Result<()> {
    let t = Tensor::arange(0.0, 36.0)?.reshape([2, 3, 2, 3])?;
    println!("{t}\n");
    println!("{}\n", Tensor::scalar(1.0f32));
    println!("{}\n", Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?);
    println!("{}", Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], [2, 3])?);
    println!("\n{:?}", Tensor::linspace(0.0, 1.0, 4)?.reshape([2, 2])?.to_dtype(DType::F64));
    Ok(())
}
