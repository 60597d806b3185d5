//! Pooling and resampling on LibTorch. ember hands a backend the windows each output reads
//! (`PoolWindows`) rather than PyTorch's arguments; the kernel, stride, padding and
//! dilation (or the adaptive output size) that produce those windows are recovered with
//! ember's own plans, and ATen's `max_pool2d_with_indices` (or `adaptive_max_pool2d`) runs
//! them. Windows no PyTorch argument set produces (none of ember's ops makes such) are
//! left to the trait's composition. Resampling (average pooling, interpolation and their
//! gradients) is a product with the two dense matrices of the separable map.

use super::storage::{dims, i, torch_err};
use crate::error::Result;
use crate::ops::pool::{
    AxisTaps, AxisWindows, MaxPoolArgs, PoolWindows, Resample, adaptive_max_pool_plan, max_pool_plan,
};
use tch::{Kind, Tensor};

/// How ATen is to pool the windows: a plain max pool's arguments, or an adaptive output.
enum Pooling {
    Plain { kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2], dilation: [usize; 2], ceil: bool },
    Adaptive([usize; 2]),
}

/// The candidate strides of one dimension: the step between the starts of two windows
/// inside the input, or every stride when there are too few windows to tell.
fn strides(a: &AxisWindows) -> Vec<usize> {
    let n = a.output();
    if n >= 3 {
        let mid = n / 2;
        let step = a.windows[mid].0.abs_diff(a.windows[mid - 1].0).max(1);
        vec![step]
    } else {
        (1..=a.input.max(1) + 1).collect()
    }
}

/// The arguments of one dimension's windows, `(kernel, stride, padding)` for dilation
/// `a.step`, with or without ceil mode, found by trying the candidates through ember's plan.
fn recover(w: &PoolWindows) -> Option<Pooling> {
    let [h, wd] = w.input();
    let plane = [1usize, 1, h, wd];
    if let Ok(plan) = adaptive_max_pool_plan::<2>("max_pool2d", &plane, w.output())
        && plan.map == *w
    {
        return Some(Pooling::Adaptive(w.output()));
    }
    let axis = |a: &AxisWindows| -> Vec<(usize, usize, usize)> {
        let widest = a.windows.iter().map(|&(_, c)| c).max().unwrap_or(1).max(1);
        let mut found = Vec::new();
        for k in widest..=2 * widest + 2 {
            for p in 0..=k / 2 {
                for &s in &strides(a) {
                    found.push((k, s, p));
                }
            }
        }
        found
    };
    let (rows, cols) = (axis(&w.rows), axis(&w.cols));
    let dilation = [w.rows.step.max(1), w.cols.step.max(1)];
    for ceil in [false, true] {
        for &(kr, sr, pr) in &rows {
            let args =
                MaxPoolArgs::new([kr, 1]).stride([sr, 1]).padding([pr, 0]).dilation([dilation[0], 1]).ceil_mode(ceil);
            let Ok(plan) = max_pool_plan::<2>("max_pool2d", &[1, 1, h, 1], &args) else { continue };
            if plan.map.rows != w.rows {
                continue;
            }
            for &(kc, sc, pc) in &cols {
                let args =
                    MaxPoolArgs::new([kr, kc]).stride([sr, sc]).padding([pr, pc]).dilation(dilation).ceil_mode(ceil);
                match max_pool_plan::<2>("max_pool2d", &plane, &args) {
                    Ok(plan) if plan.map == *w => {
                        return Some(Pooling::Plain {
                            kernel: [kr, kc],
                            stride: [sr, sc],
                            padding: [pr, pc],
                            dilation,
                            ceil,
                        });
                    }
                    _ => {}
                }
            }
        }
    }
    None
}

/// Max pooling of `[N, C, h, w]` over `windows`: the values and their flat positions in
/// the plane, or `None` when no PyTorch pooling produces these windows.
pub(crate) fn max_pool2d(x: &Tensor, windows: &PoolWindows) -> Result<Option<(Tensor, Tensor)>> {
    let e = torch_err("max_pool2d");
    let r = match recover(windows) {
        Some(Pooling::Plain { kernel, stride, padding, dilation, ceil }) => {
            x.f_max_pool2d_with_indices(dims(&kernel), dims(&stride), dims(&padding), dims(&dilation), ceil)
        }
        Some(Pooling::Adaptive(size)) => x.f_adaptive_max_pool2d(dims(&size)),
        None => return Ok(None),
    };
    r.map(Some).map_err(e)
}

/// The dense `[output, input]` matrix of one dimension of a resampling map.
fn dense(taps: &AxisTaps, kind: Kind) -> Result<Tensor> {
    let e = torch_err("resample2d");
    let (rows, cols) = (taps.output(), taps.input);
    let mut m = vec![0.0f64; rows * cols];
    for o in 0..rows {
        for (t, w) in taps.taps(o) {
            m[o * cols + t] += w;
        }
    }
    Tensor::f_from_slice(&m)
        .and_then(|t| t.f_reshape([i(rows), i(cols)]))
        .and_then(|t| t.f_to_dtype(kind, false, false))
        .map_err(e)
}

/// `rows @ x @ cols^T` for each plane of `x`.
pub(crate) fn resample2d(x: &Tensor, map: &Resample) -> Result<Tensor> {
    let e = torch_err("resample2d");
    let (r, c) = (dense(&map.rows, x.kind())?, dense(&map.cols, x.kind())?);
    r.f_matmul(x).and_then(|t| t.f_matmul(&c.f_tr()?)).map_err(e)
}
