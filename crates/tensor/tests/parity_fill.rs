//! PyTorch parity of writing a value into a tensor as it is: which values `full`,
//! `full_like`, `fill_`, `masked_fill`, `masked_fill_` and `pad` accept for each dtype, and
//! what they store, in the tensor's own dtype.
//!
//! The expected verdicts are committed in `tools/parity/fixtures/fill.tsv`, written by
//! `tools/parity/fill.py` (regenerate with `.venv-torch/bin/python tools/parity/fill.py`
//! from the repository root), so this test needs no Python. Each line holds the op, the
//! dtype, whether the value is an integer or a float, the value and what PyTorch stored (its
//! `repr`) or `error`.

use ember_tensor::{DType, Result, Scalar, Tensor};

const FIXTURE: &str = include_str!("../../../tools/parity/fixtures/fill.tsv");

/// One line of the fixture.
struct Case<'a> {
    op: &'a str,
    dtype: DType,
    value: Scalar,
    /// What PyTorch stored, `None` where it refused the value.
    stored: Option<&'a str>,
}

fn parse(line: &str) -> Case<'_> {
    let fields: Vec<&str> = line.split('\t').collect();
    let [op, dtype, kind, value, result] = fields[..] else { panic!("malformed fixture line {line:?}") };
    let dtype = match dtype {
        "u8" => DType::U8,
        "i64" => DType::I64,
        "f32" => DType::F32,
        "f64" => DType::F64,
        other => panic!("unknown dtype {other:?} in {line:?}"),
    };
    let value = match kind {
        "int" => Scalar::Int(value.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"))),
        _ => Scalar::Float(value.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"))),
    };
    Case { op, dtype, value, stored: (result != "error").then_some(result) }
}

/// Runs `case.op` on a two-element tensor; for `masked_fill` and `masked_fill_` only the
/// first element is masked, and `pad` puts one value before a one-element tensor.
fn run(case: &Case<'_>) -> Result<Tensor> {
    let zeros = || Tensor::zeros([2], case.dtype);
    match case.op {
        "full" => Tensor::full([2], case.value, case.dtype),
        "full_like" => zeros()?.full_like(case.value),
        "fill_" => {
            let t = zeros()?;
            t.fill_(case.value)?;
            Ok(t)
        }
        "pad" => Tensor::zeros([1], case.dtype)?.pad(&[(1, 0)], case.value),
        "masked_fill" => zeros()?.masked_fill(&Tensor::from_vec(vec![1u8, 0], [2])?, case.value),
        "masked_fill_" => {
            let t = zeros()?;
            t.masked_fill_(&Tensor::from_vec(vec![1u8, 0], [2])?, case.value)?;
            Ok(t)
        }
        other => panic!("unknown op {other:?}"),
    }
}

/// Whether element `i` of `t` is the value PyTorch printed as `want` (floats bit for bit,
/// NaN matching any NaN).
fn holds(t: &Tensor, i: usize, want: &str) -> Result<bool> {
    Ok(match t.dtype() {
        DType::U8 => {
            let got = t.to_vec::<u8>()?[i] as i64;
            want.parse::<i64>().is_ok_and(|w| got == w)
        }
        DType::I64 => {
            let got = t.to_vec::<i64>()?[i];
            want.parse::<i64>().is_ok_and(|w| got == w)
        }
        DType::F16 | DType::BF16 => {
            let (got, w) = (t.to_vec_f64()?[i], want.parse::<f64>());
            w.is_ok_and(|w| got == w || got.is_nan() && w.is_nan())
        }
        DType::F32 => {
            let (got, w) = (t.to_vec::<f32>()?[i], want.parse::<f64>().map(|w| w as f32));
            w.is_ok_and(|w| got.to_bits() == w.to_bits() || got.is_nan() && w.is_nan())
        }
        DType::F64 => {
            let (got, w) = (t.to_vec::<f64>()?[i], want.parse::<f64>());
            w.is_ok_and(|w| got.to_bits() == w.to_bits() || got.is_nan() && w.is_nan())
        }
    })
}

#[test]
fn values_written_into_tensors_match_pytorch() -> Result<()> {
    let mut failures = Vec::new();
    let mut cases = 0;
    for line in FIXTURE.lines().filter(|l| !l.is_empty()) {
        let case = parse(line);
        cases += 1;
        match (run(&case), case.stored) {
            (Ok(t), Some(_)) if t.dtype() != case.dtype => {
                failures.push(format!("{line}: the result is {}", t.dtype()));
            }
            (Ok(t), Some(want)) => {
                if !holds(&t, 0, want)? {
                    failures.push(format!("{line}: stored {t}"));
                }
                if case.op != "full" && case.op != "full_like" && case.op != "fill_" && !holds(&t, 1, "0")? {
                    failures.push(format!("{line}: changed an element it should not write, {t}"));
                }
            }
            (Ok(t), None) => failures.push(format!("{line}: accepted, stored {t}")),
            (Err(e), Some(_)) => failures.push(format!("{line}: refused: {e}")),
            (Err(e), None) => {
                if !e.to_string().starts_with(case.op) {
                    failures.push(format!("{line}: the error does not name the op: {e}"));
                }
            }
        }
    }
    assert!(cases > 1000, "the fixture holds only {cases} cases");
    assert!(failures.is_empty(), "{} of {cases} cases differ from PyTorch:\n{}", failures.len(), failures.join("\n"));
    Ok(())
}
