//! Profiles a few training steps of a 4-layer MLP with input shapes, call sites and memory
//! recorded: prints the per-operation table (sorted by total time), the ten rows with the
//! most self time grouped by input shape, and writes a Chrome trace to open in
//! `chrome://tracing` or Perfetto.
//!
//! `cargo run --release -p ember-autograd --example profile_mlp [trace.json]`

use ember_autograd::profiler::{ProfileOptions, SortBy, TableOptions, profile_with};
use ember_autograd::{Var, record_function};
use ember_tensor::{Result, Tensor};

fn main() -> Result<()> {
    ember_tensor::manual_seed(0);
    let ws: Vec<Var> =
        (0..4).map(|_| Tensor::randn([256, 256]).map(|t| Var::param(t.mul_scalar(0.06)))).collect::<Result<_>>()?;
    let x = Var::new(Tensor::randn([64, 256])?);
    let target = Var::new(Tensor::randn([64, 256])?);
    let options = ProfileOptions::new().record_shapes(true).with_stack(true).profile_memory(true);
    let (result, prof) = profile_with(options, || -> Result<()> {
        for _ in 0..5 {
            record_function("step", || -> Result<()> {
                let mut h = x.clone();
                for w in &ws {
                    h = h.matmul(w)?.relu();
                }
                h.sub(&target)?.square().mean_all().backward()
            })?;
        }
        Ok(())
    });
    result?;
    print!("{}", prof.table());
    println!();
    print!(
        "{}",
        prof.table_with(TableOptions { sort_by: SortBy::CpuSelf, row_limit: Some(10), group_by_input_shape: true })
    );
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| std::env::temp_dir().join("ember_profile_mlp.json").to_string_lossy().into_owned());
    prof.save_chrome_trace(&path)?;
    println!("Chrome trace: {path} ({} events)", prof.events().len());
    Ok(())
}
