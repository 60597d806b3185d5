//! Printing tensors in the format of seed 002 §4.
//!
//! - 0-d: `(1.0)`
//! - 1-d: `[1.0, 2.0, 3.0]`
//! - 2-d: nested rows, columns right-aligned:
//!   ```text
//!   [[1, 2, 3],
//!    [4, 5, 6]]
//!   ```
//! - 3-d and more: one 2-d slice per index of the leading dimensions, in memory order with
//!   0-based indices, each under a `(i,j,.,.) = ` header, then a blank line and
//!   `Tensor(shape=[2, 3, 2, 3], dtype=f32, device=cpu)`:
//!   ```text
//!   (0,0,.,.) =
//!        0       1       2
//!        3       4       5
//!   ```
//!
//! Float values share one style per tensor, like PyTorch: integral values print as `1.0`
//! in bracket form and `1` in slice form, other values with four decimals, and very large
//! or very small magnitudes in scientific notation. Tensors of more than 1000 elements show
//! the first and last three entries of each dimension around a `...`.

use crate::Tensor;
use crate::dtype::DType;
use std::fmt::{self, Write};

const SUMMARIZE_ABOVE: usize = 1000;
const EDGE: usize = 3;
const SLICE_MIN_WIDTH: usize = 6;

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Int,
    Integral,
    Fixed,
    Sci,
}

struct Formatter {
    style: Style,
}

impl Formatter {
    fn for_values(dtype: DType, values: &[f64]) -> Self {
        if dtype.is_int() {
            return Formatter { style: Style::Int };
        }
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let max = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let min_nonzero = finite.iter().filter(|v| **v != 0.0).fold(f64::INFINITY, |m, v| m.min(v.abs()));
        let style = if finite.iter().all(|v| v.fract() == 0.0) && max < 1e8 {
            Style::Integral
        } else if max >= 1e8 || min_nonzero < 1e-4 {
            Style::Sci
        } else {
            Style::Fixed
        };
        Formatter { style }
    }

    /// One value; `slice` selects the slice form (integral floats without `.0`).
    fn format(&self, v: f64, slice: bool) -> String {
        if v.is_nan() {
            return "nan".into();
        }
        if v.is_infinite() {
            return if v > 0.0 { "inf".into() } else { "-inf".into() };
        }
        match self.style {
            Style::Int => format!("{}", v as i64),
            Style::Integral if slice => format!("{v:.0}"),
            Style::Integral => format!("{v:.1}"),
            Style::Fixed => format!("{v:.4}"),
            Style::Sci => {
                let s = format!("{v:.4e}");
                // Rust writes `1.2340e8`; PyTorch writes `1.2340e+08`.
                match s.split_once('e') {
                    Some((m, e)) => {
                        let (sign, digits) = if let Some(d) = e.strip_prefix('-') { ('-', d) } else { ('+', e) };
                        format!("{m}e{sign}{digits:0>2}")
                    }
                    None => s,
                }
            }
        }
    }
}

/// Indices of one dimension to print: all, or the first and last `EDGE` with a gap marker.
fn shown(extent: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && extent > 2 * EDGE {
        (0..EDGE).map(Some).chain([None]).chain((extent - EDGE..extent).map(Some)).collect()
    } else {
        (0..extent).map(Some).collect()
    }
}

struct Printer<'a> {
    shape: &'a [usize],
    strides: Vec<usize>,
    values: Vec<f64>,
    summarize: bool,
    fmt: Formatter,
}

impl Printer<'_> {
    fn at(&self, idx: &[usize]) -> f64 {
        self.values[idx.iter().zip(&self.strides).map(|(i, s)| i * s).sum::<usize>()]
    }

    fn row(&self, prefix: &[usize]) -> Vec<Option<f64>> {
        let last = *self.shape.last().unwrap_or(&1);
        shown(last, self.summarize)
            .into_iter()
            .map(|j| {
                j.map(|j| {
                    let mut idx = prefix.to_vec();
                    idx.push(j);
                    self.at(&idx)
                })
            })
            .collect()
    }

    fn bracket_1d(&self, out: &mut String, prefix: &[usize], width: usize) {
        out.push('[');
        let cells: Vec<String> = self
            .row(prefix)
            .into_iter()
            .map(|v| match v {
                Some(v) => format!("{:>width$}", self.fmt.format(v, false)),
                None => "...".into(),
            })
            .collect();
        out.push_str(&cells.join(", "));
        out.push(']');
    }

    fn widest(&self, slice: bool) -> usize {
        self.values.iter().map(|&v| self.fmt.format(v, slice).len()).max().unwrap_or(1)
    }

    fn two_d(&self, out: &mut String) {
        let width = self.widest(false);
        out.push('[');
        let rows = shown(self.shape[0], self.summarize);
        for (n, r) in rows.iter().enumerate() {
            if n > 0 {
                out.push_str(",\n ");
            }
            match r {
                Some(r) => self.bracket_1d(out, &[*r], width),
                None => out.push_str("..."),
            }
        }
        out.push(']');
    }

    fn slices(&self, out: &mut String) {
        let rank = self.shape.len();
        let lead = &self.shape[..rank - 2];
        let width = self.widest(true).max(SLICE_MIN_WIDTH);
        // Every combination of shown leading indices, in memory (row-major) order.
        let per_dim: Vec<Vec<Option<usize>>> = lead.iter().map(|&d| shown(d, self.summarize)).collect();
        let mut combos: Vec<Vec<Option<usize>>> = vec![vec![]];
        for choices in &per_dim {
            let mut next = Vec::new();
            for c in &combos {
                for &x in choices {
                    let mut v = c.clone();
                    v.push(x);
                    next.push(v);
                }
            }
            combos = next;
        }
        let mut last_gap = false;
        for combo in combos {
            if combo.iter().any(|x| x.is_none()) {
                if !last_gap {
                    out.push_str("...\n");
                    last_gap = true;
                }
                continue;
            }
            last_gap = false;
            let idx: Vec<usize> = combo.into_iter().flatten().collect();
            out.push('(');
            for i in &idx {
                let _ = write!(out, "{i},");
            }
            out.push_str(".,.) = \n");
            for r in shown(self.shape[rank - 2], self.summarize) {
                match r {
                    None => out.push_str("...\n"),
                    Some(r) => {
                        let mut prefix = idx.clone();
                        prefix.push(r);
                        let cells: Vec<String> = self
                            .row(&prefix)
                            .into_iter()
                            .map(|v| match v {
                                Some(v) => format!("{:>width$}", self.fmt.format(v, true)),
                                None => format!("{:>width$}", "..."),
                            })
                            .collect();
                        out.push_str(&cells.join("  "));
                        out.push('\n');
                    }
                }
            }
        }
    }
}

fn footer(t: &Tensor) -> String {
    format!("Tensor(shape={:?}, dtype={}, device={})", t.shape(), t.dtype(), t.device())
}

fn render(t: &Tensor) -> Result<String, fmt::Error> {
    let values = t.to_vec_f64().map_err(|_| fmt::Error)?;
    let shape = t.shape();
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let summarize = t.numel() > SUMMARIZE_ABOVE;
    let fmt = Formatter::for_values(t.dtype(), &values);
    let p = Printer { shape, strides, values, summarize, fmt };
    let mut out = String::new();
    match shape.len() {
        0 => {
            let _ = write!(out, "({})", p.fmt.format(p.values[0], false));
        }
        1 => p.bracket_1d(&mut out, &[], 0),
        2 => p.two_d(&mut out),
        _ => {
            p.slices(&mut out);
            out.push('\n');
            out.push_str(&footer(t));
        }
    }
    Ok(out)
}

pub(crate) fn fmt_display(t: &Tensor, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.write_str(&render(t)?)
}

pub(crate) fn fmt_debug(t: &Tensor, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let body = render(t)?;
    if t.rank() >= 3 { f.write_str(&body) } else { write!(f, "{body}\n{}", footer(t)) }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    #[test]
    fn seed_format_for_4d() {
        let t = Tensor::arange(0.0, 36.0).unwrap().reshape([2, 3, 2, 3]).unwrap();
        let want = "\
(0,0,.,.) = 
     0       1       2
     3       4       5
(0,1,.,.) = 
     6       7       8
     9      10      11
(0,2,.,.) = 
    12      13      14
    15      16      17
(1,0,.,.) = 
    18      19      20
    21      22      23
(1,1,.,.) = 
    24      25      26
    27      28      29
(1,2,.,.) = 
    30      31      32
    33      34      35

Tensor(shape=[2, 3, 2, 3], dtype=f32, device=cpu)";
        assert_eq!(t.to_string(), want);
    }

    #[test]
    fn low_rank_formats() {
        assert_eq!(Tensor::scalar(1.0f32).to_string(), "(1.0)");
        assert_eq!(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]).unwrap().to_string(), "[1.0, 2.0, 3.0]");
        let m = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], [2, 3]).unwrap();
        assert_eq!(m.to_string(), "[[1, 2, 3],\n [4, 5, 6]]");
        let f = Tensor::from_vec(vec![0.5f32, -12.25], [2]).unwrap();
        assert_eq!(f.to_string(), "[0.5000, -12.2500]");
        let s = Tensor::from_vec(vec![1e9f64, 1.0], [2]).unwrap();
        assert_eq!(s.to_string(), "[1.0000e+09, 1.0000e+00]");
        let d = format!("{:?}", Tensor::zeros([2], DType::F64).unwrap());
        assert_eq!(d, "[0.0, 0.0]\nTensor(shape=[2], dtype=f64, device=cpu)");
    }

    #[test]
    fn large_tensors_are_summarized() {
        let t = Tensor::arange(0, 2000).unwrap();
        assert_eq!(t.to_string(), "[0, 1, 2, ..., 1997, 1998, 1999]");
        let m = Tensor::arange(0, 2000).unwrap().reshape([40, 50]).unwrap().to_string();
        assert!(m.starts_with("[[   0,    1,    2, ...,   47,   48,   49],\n [  50,"), "{m}");
        assert!(m.contains(",\n ...,\n"));
        let h = Tensor::arange(0, 2000).unwrap().reshape([10, 2, 100]).unwrap().to_string();
        assert!(h.contains("(2,.,.) = \n") && h.contains("...\n(7,.,.) = ") && !h.contains("(3,.,"), "{h}");
        assert!(h.contains("     0       1       2     ...      97      98      99\n"), "{h}");
    }
}
