//! Backward inside `no_grad` on a graph recorded outside it works and logs one warning
//! (docs/design.md, 'Accumulation rules'). Alone in its file: the logger is process-wide.

use ember_autograd::{Var, no_grad};
use ember_tensor::{Result, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};

static WARNINGS: AtomicUsize = AtomicUsize::new(0);

struct CountWarnings;

impl log::Log for CountWarnings {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record) {
        if r.level() == log::Level::Warn && r.args().to_string().contains("no_grad") {
            WARNINGS.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn flush(&self) {}
}

#[test]
fn backward_inside_no_grad_works_and_warns_once() -> Result<()> {
    log::set_logger(&CountWarnings).map_err(|e| ember_tensor::Error::autograd(e.to_string()))?;
    log::set_max_level(log::LevelFilter::Warn);
    let w = Var::param(Tensor::from_vec(vec![1.0f64, 2.0], [2])?);
    let loss = w.square().sum_all();
    no_grad(|| loss.backward())?;
    assert_eq!(w.grad().unwrap().to_vec::<f64>()?, vec![2.0, 4.0]);
    assert_eq!(WARNINGS.load(Ordering::SeqCst), 1);
    Ok(())
}
