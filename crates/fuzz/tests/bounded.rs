//! A bounded fuzz run of every reader, part of `cargo test`: the committed corpus (valid
//! seeds and kept regression inputs) and a fixed number of seeded mutations each. Longer
//! runs: `cargo run --release -p ember-fuzz -- --target all --seconds 600`.

use ember_fuzz::alloc_count::{self, CountingAlloc};
use ember_fuzz::{Config, Target};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Mutated inputs per reader: the nine together take well under a minute in a debug build
/// on two cores.
const ITERATIONS: u64 = 1500;

fn fuzz(target: Target) {
    let report = ember_fuzz::run(&Config::new(target, ITERATIONS)).unwrap();
    println!("{}: {report}", target.name());
    assert!(alloc_count::installed(), "the counting allocator is not installed");
    assert!(report.failures.is_empty(), "{}: {:#?}", target.name(), report.failures);
    assert!(report.inputs > ITERATIONS, "{}: {report}", target.name());
    // Both kinds of outcome must be reached, or the mutations are too weak or too strong.
    assert!(report.accepted > 0 && report.rejected > 0, "{}: {report}", target.name());
}

#[test]
fn safetensors_reader_survives_mutations() {
    fuzz(Target::Safetensors);
}

#[test]
fn optimizer_state_reader_survives_mutations() {
    fuzz(Target::Optimizer);
}

#[test]
fn idx_reader_survives_mutations() {
    fuzz(Target::Idx);
}

#[test]
fn idx_gzip_reader_survives_mutations() {
    fuzz(Target::IdxGz);
}

#[test]
fn mnist_loader_survives_mutations() {
    fuzz(Target::Mnist);
}

#[test]
fn torch_checkpoint_reader_survives_mutations() {
    fuzz(Target::TorchPt);
}

#[test]
fn onnx_reader_survives_mutations() {
    fuzz(Target::Onnx);
}

#[test]
fn pnnx_reader_survives_mutations() {
    fuzz(Target::Pnnx);
}

#[test]
fn model_config_reader_survives_mutations() {
    fuzz(Target::ModelConfig);
}
