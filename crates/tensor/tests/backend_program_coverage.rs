//! The random backend programs (`backend_program/`) that the LibTorch differential test
//! runs cover every `Backend` method and every row of the four op tables: this fails when
//! a method or a row is added without a step that exercises it. It runs the programs on
//! the CPU backend, so it needs no LibTorch and runs in every build.

mod backend_program;

use backend_program::{Program, unary_ops};
use ember_tensor::UnaryOp;
use ember_tensor::backend::cpu::CpuBackend;
use std::collections::BTreeSet;

/// The names of every `Backend` method, from the method list itself.
macro_rules! method_names {
    ($({ [$(#[$m:meta])*] $name:ident $self:ident ($($arg:ident: $ty:ty),*) ($ret:ty) ($($body:tt)*) })*) => {
        &[$(stringify!($name)),*]
    };
}

macro_rules! binary_names {
    ($($(#[$m:meta])* $v:ident => $method:ident, $($k:ident $b:tt),*;)*) => {
        &[$(stringify!($method)),*]
    };
}

macro_rules! compare_names {
    ($($(#[$m:meta])* $v:ident => $method:ident, $s:ident, $sym:literal, $($k:ident $b:tt),*;)*) => {
        &[$(stringify!($method)),*]
    };
}

macro_rules! reduce_names {
    ($($(#[$m:meta])* $v:ident => $method:ident, $kind:ident, $($k:ident $b:tt),*;)*) => {
        &[$(stringify!($method)),*]
    };
}

const METHODS: &[&str] = ember_tensor::backend_methods!([method_names]);
const BINARY: &[&str] = ember_tensor::binary_table!(binary_names);
const COMPARE: &[&str] = ember_tensor::compare_table!(compare_names);
const REDUCE: &[&str] = ember_tensor::reduce_table!(reduce_names);

/// What one run of every kind of step touched: methods, and `method/variant` pairs.
fn covered() -> (BTreeSet<&'static str>, BTreeSet<(&'static str, &'static str)>) {
    let mut p = Program::new(&CpuBackend, 7);
    p.run_each();
    let methods = p.steps.iter().map(|s| s.method).collect();
    let variants = p.steps.iter().filter_map(|s| s.variant.map(|v| (s.method, v))).collect();
    (methods, variants)
}

#[test]
fn the_programs_call_every_backend_method() {
    let (methods, _) = covered();
    let missing: Vec<_> = METHODS.iter().filter(|m| !methods.contains(*m)).collect();
    assert!(missing.is_empty(), "Backend methods no program step calls: {missing:?}");
    assert!(METHODS.len() >= 50, "the method list looks truncated: {METHODS:?}");
}

#[test]
fn the_programs_run_every_op_table_row() {
    let (_, variants) = covered();
    let tables: [(&str, &[&str]); 4] =
        [("unary", UnaryOp::NAMES), ("binary", BINARY), ("compare", COMPARE), ("reduce", REDUCE)];
    for (method, names) in tables {
        let missing: Vec<_> = names.iter().filter(|n| !variants.contains(&(method, **n))).collect();
        assert!(missing.is_empty(), "{method} rows no program step runs: {missing:?}");
    }
    // Every scalar form of the comparisons too.
    let missing: Vec<_> = COMPARE.iter().filter(|n| !variants.contains(&("compare_scalar", **n))).collect();
    assert!(missing.is_empty(), "compare_scalar rows no program step runs: {missing:?}");
}

#[test]
fn the_unary_list_names_every_row() {
    let listed: BTreeSet<_> = unary_ops().iter().map(|op| op.name()).collect();
    let missing: Vec<_> = UnaryOp::NAMES.iter().filter(|n| !listed.contains(*n)).collect();
    assert!(missing.is_empty(), "unary rows missing from backend_program::unary_ops: {missing:?}");
}
