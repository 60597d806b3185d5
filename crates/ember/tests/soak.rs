//! A short soak: each variant of [`ember::soak`] trains the quick-start MLP for a few
//! hundred steps, and resident memory after warm-up must stay within a few percent of the
//! baseline. A leak of one activation per step (64 x 256 floats) would add over 10 MiB here.
//! The full 10,000-step run is `cargo run --release --example soak`.

use ember::soak::{Config, Variant, run};

/// Steps in all and before the baseline: the warm-up covers the optimizer's state creation
/// and the allocator reaching its steady pool.
const STEPS: usize = 300;
const WARMUP: usize = 100;

/// Allowed growth: allocator noise is well under this, a per-step leak well over.
const MAX_GROWTH_PERCENT: f64 = 5.0;

fn soak(variant: Variant) {
    ember::manual_seed(0);
    let r = run(&Config { variant, steps: STEPS, warmup: WARMUP, batch: 64, sample_every: 20 }).unwrap();
    let growth = r.growth_percent();
    println!(
        "{}: baseline {} KiB, peak {} KiB, growth {growth:.2}%",
        variant.name(),
        r.baseline / 1024,
        r.peak_after_warmup / 1024
    );
    assert!(r.final_loss.is_finite(), "{}: loss {}", variant.name(), r.final_loss);
    assert!(growth < MAX_GROWTH_PERCENT, "{}: memory grew {growth:.2}% after warm-up: {:?}", variant.name(), r.samples);
}

// One test runs every variant in turn: resident memory is per process, so variants running
// in parallel test threads would see each other's allocations.
#[test]
fn training_memory_stays_flat_after_warmup() {
    for v in Variant::ALL {
        soak(v);
    }
}
