//! Profiles a few training steps of a 4-layer MLP: prints the per-operation table (sorted
//! by total time) and writes a Chrome trace to open in `chrome://tracing` or Perfetto.
//!
//! `cargo run --release -p ember-autograd --example profile_mlp [trace.json]`

use ember_autograd::{Var, profile, record_function};
use ember_tensor::{Result, Tensor};

fn main() -> Result<()> {
    ember_tensor::manual_seed(0);
    let ws: Vec<Var> =
        (0..4).map(|_| Tensor::randn([256, 256]).map(|t| Var::param(t.mul_scalar(0.06)))).collect::<Result<_>>()?;
    let x = Var::new(Tensor::randn([64, 256])?);
    let target = Var::new(Tensor::randn([64, 256])?);
    let (result, prof) = profile(|| -> Result<()> {
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
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| std::env::temp_dir().join("ember_profile_mlp.json").to_string_lossy().into_owned());
    prof.save_chrome_trace(&path)?;
    println!("Chrome trace: {path} ({} events)", prof.events().len());
    Ok(())
}
