//! Printing tensors in ember's format (docs/design.md, 'Print format').
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
//! Integer tensors print their values exactly. Float values share one notation per tensor,
//! chosen by PyTorch's rule over the non-zero finite magnitudes that are printed: scientific
//! (`1.0000e+09`) when `max / min > 1000` or `max > 1e8`, or when some value is not
//! integral and `min < 1e-4`; otherwise integral values print as `1.0` in bracket form and
//! `1` in slice form, and other values with four decimals (`0.5000`). Tensors of more than
//! 1000 elements show the first and last three entries of each dimension around a `...`;
//! only those entries are read, so printing a huge (even a broadcast) tensor costs nothing.

use crate::Tensor;
use crate::dtype::{DType, Element};
use crate::layout::Layout;
use crate::storage::CpuStorage;
use std::fmt::{self, Write};

const SUMMARIZE_ABOVE: usize = 1000;
const EDGE: usize = 3;
const SLICE_MIN_WIDTH: usize = 6;

/// One printed element: integers exactly (an `i64` above 2^53 has no exact `f64`).
#[derive(Clone, Copy)]
enum Value {
    Int(i64),
    Float(f64),
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Style {
    Int,
    Integral,
    Fixed,
    Sci,
}

/// PyTorch's choice of notation (`torch._tensor_str._Formatter`), made from the printed
/// values only. Over the non-zero finite magnitudes: when all are integral, scientific
/// notation if `max / min > 1000` or `max > 1e8`, integral notation otherwise; when some are
/// not, scientific notation also if `min < 1e-4`, fixed notation with four decimals
/// otherwise.
fn float_style(values: impl Iterator<Item = f64>) -> Style {
    let (mut min, mut max, mut integral) = (f64::INFINITY, 0.0f64, true);
    for v in values.filter(|v| v.is_finite() && *v != 0.0) {
        min = min.min(v.abs());
        max = max.max(v.abs());
        integral &= v.fract() == 0.0;
    }
    if max == 0.0 {
        // Only zeros, infinities and NaN: PyTorch keeps integral notation.
        return Style::Integral;
    }
    let wide = max / min > 1000.0 || max > 1e8;
    match (integral, wide || (!integral && min < 1e-4)) {
        (_, true) => Style::Sci,
        (true, false) => Style::Integral,
        (false, false) => Style::Fixed,
    }
}

/// One value in `style`; `slice` selects the slice form (integral floats without `.0`).
fn format_value(style: Style, v: Value, slice: bool) -> String {
    let v = match v {
        Value::Int(i) => return i.to_string(),
        Value::Float(v) => v,
    };
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    match style {
        Style::Int => format!("{v}"),
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

/// The indices of one dimension that are printed: all of them, or the first and last
/// `EDGE` with a gap between.
struct Axis {
    idx: Vec<usize>,
    gap: bool,
}

impl Axis {
    fn new(extent: usize, summarize: bool) -> Self {
        if summarize && extent > 2 * EDGE {
            Axis { idx: (0..EDGE).chain(extent - EDGE..extent).collect(), gap: true }
        } else {
            Axis { idx: (0..extent).collect(), gap: false }
        }
    }

    /// Positions into `idx` in printing order, `None` where the `...` goes.
    fn items(&self) -> Vec<Option<usize>> {
        let n = self.idx.len();
        if !self.gap {
            return (0..n).map(Some).collect();
        }
        (0..EDGE).map(Some).chain([None]).chain((EDGE..n).map(Some)).collect()
    }
}

/// The printed elements of a tensor, read from its storage one by one: a summarised
/// tensor shows a few elements per dimension, and only those are read and formatted.
struct Printer {
    shape: Vec<usize>,
    axes: Vec<Axis>,
    /// The shown elements, row-major over the axes' positions.
    values: Vec<Value>,
    /// Strides of `values` over axis positions.
    strides: Vec<usize>,
    style: Style,
}

/// The elements at every combination of the axes' indices, row-major; `None` when even
/// the summary does not fit in memory (a broadcast view of dozens of dimensions).
fn gather<T: Element>(data: &[T], layout: &Layout, axes: &[Axis], wrap: impl Fn(T) -> Value) -> Option<Vec<Value>> {
    let total = axes.iter().try_fold(1usize, |n, a| n.checked_mul(a.idx.len()))?;
    let mut out = Vec::new();
    out.try_reserve_exact(total).ok()?;
    let mut pos = vec![0usize; axes.len()];
    for _ in 0..total {
        let at = layout.offset()
            + pos.iter().zip(axes).zip(layout.strides()).map(|((&p, a), &s)| a.idx[p] * s).sum::<usize>();
        out.push(wrap(data[at]));
        for d in (0..axes.len()).rev() {
            pos[d] += 1;
            if pos[d] < axes[d].idx.len() {
                break;
            }
            pos[d] = 0;
        }
    }
    Some(out)
}

impl Printer {
    fn new(data: &CpuStorage, layout: &Layout, dtype: DType) -> Option<Self> {
        let shape = layout.shape().to_vec();
        let summarize = layout.numel() > SUMMARIZE_ABOVE;
        let axes: Vec<Axis> = shape.iter().map(|&d| Axis::new(d, summarize)).collect();
        let values = if layout.numel() == 0 {
            Vec::new()
        } else {
            match data {
                CpuStorage::U8(b) => gather(b, layout, &axes, |v| Value::Int(v as i64))?,
                CpuStorage::I64(b) => gather(b, layout, &axes, Value::Int)?,
                CpuStorage::F32(b) => gather(b, layout, &axes, |v| Value::Float(v as f64))?,
                CpuStorage::F64(b) => gather(b, layout, &axes, Value::Float)?,
                CpuStorage::F16(b) => gather(b, layout, &axes, |v| Value::Float(v.to_f64()))?,
                CpuStorage::BF16(b) => gather(b, layout, &axes, |v| Value::Float(v.to_f64()))?,
            }
        };
        let style = if dtype.is_int() {
            Style::Int
        } else {
            float_style(values.iter().map(|v| match *v {
                Value::Float(f) => f,
                Value::Int(i) => i as f64,
            }))
        };
        let mut strides = vec![1usize; axes.len()];
        for i in (0..axes.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * axes[i + 1].idx.len();
        }
        Some(Printer { shape, axes, values, strides, style })
    }

    fn at(&self, pos: &[usize]) -> Value {
        self.values[pos.iter().zip(&self.strides).map(|(p, s)| p * s).sum::<usize>()]
    }

    fn format(&self, v: Value, slice: bool) -> String {
        format_value(self.style, v, slice)
    }

    fn widest(&self, slice: bool) -> usize {
        self.values.iter().map(|&v| self.format(v, slice).len()).max().unwrap_or(1)
    }

    /// The cells of the row at axis positions `prefix` (gaps as `None`).
    fn row(&self, prefix: &[usize]) -> Vec<Option<Value>> {
        let Some(last) = self.axes.last() else { return vec![Some(self.at(&[]))] };
        let mut pos = prefix.to_vec();
        pos.push(0);
        let k = prefix.len();
        last.items()
            .into_iter()
            .map(|p| {
                p.map(|p| {
                    pos[k] = p;
                    self.at(&pos)
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
                Some(v) => format!("{:>width$}", self.format(v, false)),
                None => "...".into(),
            })
            .collect();
        out.push_str(&cells.join(", "));
        out.push(']');
    }

    fn two_d(&self, out: &mut String) {
        let width = self.widest(false);
        out.push('[');
        for (n, r) in self.axes[0].items().into_iter().enumerate() {
            if n > 0 {
                out.push_str(",\n ");
            }
            match r {
                Some(r) => self.bracket_1d(out, &[r], width),
                None => out.push_str("..."),
            }
        }
        out.push(']');
    }

    fn slices(&self, out: &mut String) {
        let rank = self.shape.len();
        let width = self.widest(true).max(SLICE_MIN_WIDTH);
        // Every combination of shown leading positions, in memory (row-major) order.
        let mut combos: Vec<Vec<Option<usize>>> = vec![vec![]];
        for axis in &self.axes[..rank - 2] {
            let mut next = Vec::new();
            for c in &combos {
                for &x in &axis.items() {
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
            let pos: Vec<usize> = combo.into_iter().flatten().collect();
            out.push('(');
            for (d, &p) in pos.iter().enumerate() {
                let _ = write!(out, "{},", self.axes[d].idx[p]);
            }
            out.push_str(".,.) = \n");
            for r in self.axes[rank - 2].items() {
                match r {
                    None => out.push_str("...\n"),
                    Some(r) => {
                        let mut prefix = pos.clone();
                        prefix.push(r);
                        let cells: Vec<String> = self
                            .row(&prefix)
                            .into_iter()
                            .map(|v| match v {
                                Some(v) => format!("{:>width$}", self.format(v, true)),
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
    let p = t.read(|(s, l)| match s.as_cpu() {
        Some(c) => Printer::new(c, l, t.dtype()),
        // Another device: from a host copy of the whole view.
        None => {
            let host = t.backend().download((s, l)).ok()?;
            Printer::new(&host, &Layout::contiguous(l.shape().clone()), t.dtype())
        }
    });
    let p = p.ok_or(fmt::Error)?;
    let mut out = String::new();
    match p.shape.len() {
        0 => {
            let _ = write!(out, "({})", p.format(p.at(&[]), false));
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

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render(self)?)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let body = render(self)?;
        if self.rank() >= 3 { f.write_str(&body) } else { write!(f, "{body}\n{}", footer(self)) }
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    #[test]
    fn slices_for_4d() {
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
    fn scientific_notation_follows_pytorch() {
        let f = |v: Vec<f32>| Tensor::from_vec(v.clone(), [v.len()]).unwrap().to_string();
        // Integral values spanning more than three orders of magnitude.
        assert_eq!(f(vec![1.0, 2000.0]), "[1.0000e+00, 2.0000e+03]");
        assert_eq!(f(vec![1.0, 999.0]), "[1.0, 999.0]");
        assert_eq!(f(vec![0.0, 1e8]), "[0.0, 100000000.0]");
        assert_eq!(f(vec![2e8, 3e8]), "[2.0000e+08, 3.0000e+08]");
        // Fractions: the ratio, the largest and the smallest magnitude.
        assert_eq!(f(vec![0.001, 0.5]), "[0.0010, 0.5000]");
        assert_eq!(f(vec![0.5, 400.0]), "[0.5000, 400.0000]");
        assert_eq!(f(vec![0.5, 501.0]), "[5.0000e-01, 5.0100e+02]");
        assert_eq!(f(vec![0.00001, 0.00002]), "[1.0000e-05, 2.0000e-05]");
        assert_eq!(f(vec![-0.5, f32::NAN, f32::INFINITY, 0.0]), "[-0.5000, nan, inf, 0.0000]");
        assert_eq!(f(vec![0.0, f32::NEG_INFINITY]), "[0.0, -inf]");
        // PyTorch prints torch.arange(2000.) in scientific notation: 1999 / 1 > 1000.
        let a = Tensor::arange(0.0, 2000.0).unwrap().to_string();
        assert_eq!(a, "[0.0000e+00, 1.0000e+00, 2.0000e+00, ..., 1.9970e+03, 1.9980e+03, 1.9990e+03]");
    }

    #[test]
    fn integers_print_exactly() {
        let big = Tensor::from_vec(vec![(1i64 << 53) + 1, i64::MAX, i64::MIN], [3]).unwrap();
        assert_eq!(big.to_string(), "[9007199254740993, 9223372036854775807, -9223372036854775808]");
        assert_eq!(Tensor::scalar(255u8).to_string(), "(255)");
    }

    #[test]
    fn summaries_read_only_the_shown_entries() {
        // A broadcast view of 3 * 2^58 elements: materialising it would fail.
        let huge = Tensor::scalar(1.5f64).expand([3 << 58]).unwrap();
        assert_eq!(huge.to_string(), "[1.5000, 1.5000, 1.5000, ..., 1.5000, 1.5000, 1.5000]");
        let grid = Tensor::scalar(7i64).expand([1 << 29, 1 << 29]).unwrap().to_string();
        assert!(
            grid.starts_with(
                "[[7, 7, 7, ..., 7, 7, 7],
 [7,"
            ) && grid.ends_with("7, 7]]"),
            "{grid}"
        );
        // The notation comes from the shown entries only, as in PyTorch: a huge value in
        // the hidden middle does not switch the print to scientific notation.
        let mut v: Vec<f32> = (0..2000).map(|i| i as f32 % 7.0).collect();
        v[1000] = 1e20;
        let t = Tensor::from_vec(v, [2000]).unwrap();
        assert_eq!(t.to_string(), "[0.0, 1.0, 2.0, ..., 2.0, 3.0, 4.0]");
        let s = Tensor::scalar(2.5f32).expand([4, 300, 2, 3]).unwrap().to_string();
        assert!(s.starts_with("(0,0,.,.) = \n2.5000  2.5000  2.5000\n2.5000  2.5000  2.5000\n(0,1,.,.) = "), "{s}");
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
