//! Property tests of the layer-shaped `Tensor` ops under random, often invalid, geometry:
//! convolutions (1-d, 2-d, transposed; stride, padding, dilation, groups, bias), unfold and
//! fold, the pools (max and average with padding, dilation, `ceil_mode`,
//! `count_include_pad`, `divisor_override`; adaptive), interpolation, and the joins,
//! slices, masks and reductions `prop_api.rs` leaves out. Each call either matches a naive
//! loop in this file (explicit windows, direct sums) or fails with an error naming the op;
//! a panic fails the property.

use ember_tensor::ops::pool::{AvgPoolArgs, InterpolateArgs, InterpolateMode, MaxPoolArgs};
use ember_tensor::{ConvArgs, ConvTransposeArgs, DType, Result, Tensor, UnfoldArgs};
use ember_testing::prop::{at, dtype, f64s, indices, ok_or_names, resolve, shape, tensor, values};
use proptest::prelude::*;

/// Cases per property: every error path is hit, and the file runs in seconds in debug.
const CASES: u32 = 1000;

fn close(got: &[f64], want: &[f64], dt: DType) -> bool {
    let tol = if dt == DType::F32 { 1e-4 } else { 1e-10 };
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs()))
}

/// A reduction of one lane of values.
type Lane<'a> = dyn Fn(&[f64]) -> f64 + 'a;

/// The geometry of one spatial dimension.
#[derive(Clone, Copy, Debug)]
struct Geom {
    k: usize,
    s: usize,
    p: usize,
    d: usize,
}

impl Geom {
    /// The output size of a convolution or pool over `n` elements (`None` when the
    /// dilated kernel does not fit), rounded down or, with `ceil`, up as PyTorch's pools do.
    fn out(&self, n: usize, ceil: bool) -> Option<usize> {
        if self.s == 0 || self.k == 0 {
            return None;
        }
        let (n, k, s, p, d) = (n as i64, self.k as i64, self.s as i64, self.p as i64, self.d as i64);
        // With ceil the padded input may end inside the last window, even the first.
        let span = n + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
        let mut o = span.div_euclid(s) + 1;
        // The last window must start inside the input or its left padding.
        if ceil && (o - 1) * s >= n + p {
            o -= 1;
        }
        (o >= 1).then_some(o as usize)
    }

    /// The input position of output `o`'s tap `t`, if inside the input of `n` elements.
    fn tap(&self, o: usize, t: usize, n: usize) -> Option<usize> {
        let i = (o * self.s + t * self.d) as i64 - self.p as i64;
        (0..n as i64).contains(&i).then_some(i as usize)
    }
}

/// Naive grouped 2-d convolution of `x [n, c, h, w]` with `w [oc, c / g, kh, kw]`.
#[allow(clippy::too_many_arguments)]
fn naive_conv(
    x: &[f64],
    xs: [usize; 4],
    w: &[f64],
    ws: [usize; 4],
    bias: Option<&[f64]>,
    g: [Geom; 2],
    groups: usize,
    out: [usize; 2],
) -> Vec<f64> {
    let [n, c, h, wd] = xs;
    let [oc, cpg, kh, kw] = ws;
    let opg = oc / groups;
    let mut y = Vec::with_capacity(n * oc * out[0] * out[1]);
    for b in 0..n {
        for o in 0..oc {
            let grp = o / opg.max(1);
            for oh in 0..out[0] {
                for ow in 0..out[1] {
                    let mut acc = bias.map_or(0.0, |b| b[o]);
                    for ci in 0..cpg {
                        let ch = grp * cpg + ci;
                        for i in 0..kh {
                            for j in 0..kw {
                                if let (Some(ih), Some(iw)) = (g[0].tap(oh, i, h), g[1].tap(ow, j, wd)) {
                                    acc += x[((b * c + ch) * h + ih) * wd + iw] * w[((o * cpg + ci) * kh + i) * kw + j];
                                }
                            }
                        }
                    }
                    y.push(acc);
                }
            }
        }
    }
    y
}

/// Naive grouped 2-d transposed convolution of `x [n, c, h, w]` with `w [c, oc / g, kh,
/// kw]`: every input element scatters its products into the output.
#[allow(clippy::too_many_arguments)]
fn naive_conv_transpose(
    x: &[f64],
    xs: [usize; 4],
    w: &[f64],
    ws: [usize; 4],
    bias: Option<&[f64]>,
    g: [Geom; 2],
    groups: usize,
    out: [usize; 2],
) -> Vec<f64> {
    let [n, c, h, wd] = xs;
    let [_, opg, kh, kw] = ws;
    let oc = opg * groups;
    let cpg = c / groups;
    let mut y = vec![0.0; n * oc * out[0] * out[1]];
    for b in 0..n {
        for ci in 0..c {
            let grp = ci / cpg.max(1);
            for ih in 0..h {
                for iw in 0..wd {
                    for ol in 0..opg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let oh = (ih * g[0].s + i * g[0].d) as i64 - g[0].p as i64;
                                let ow = (iw * g[1].s + j * g[1].d) as i64 - g[1].p as i64;
                                if (0..out[0] as i64).contains(&oh) && (0..out[1] as i64).contains(&ow) {
                                    let o = grp * opg + ol;
                                    y[((b * oc + o) * out[0] + oh as usize) * out[1] + ow as usize] +=
                                        x[((b * c + ci) * h + ih) * wd + iw] * w[((ci * opg + ol) * kh + i) * kw + j];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(bias) = bias {
        for (i, v) in y.iter_mut().enumerate() {
            *v += bias[(i / (out[0] * out[1])) % oc];
        }
    }
    y
}

fn geom() -> impl Strategy<Value = Geom> {
    (0usize..4, 0usize..3, 0usize..3, 0usize..3).prop_map(|(k, s, p, d)| Geom { k, s, p, d })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// conv1d and conv2d with random stride, padding, dilation (zero included), groups and
    /// bias: the naive direct sum, or an error naming the op.
    #[test]
    fn conv_matches_naive(n in 0usize..3, c in 0usize..5, h in 0usize..6, w in 0usize..6, oc in 0usize..5, groups in 0usize..4, gh in geom(), gw in geom(), bias in any::<bool>(), seed in any::<u64>(), dt in dtype()) {
        let cpg = c / groups.max(1);
        let x = tensor(&[n, c, h, w], seed, dt);
        let weight = tensor(&[oc, cpg, gh.k, gw.k], seed ^ 1, dt);
        let b = tensor(&[oc], seed ^ 2, dt);
        let args = ConvArgs::default().stride([gh.s, gw.s]).padding([gh.p, gw.p]).dilation([gh.d, gw.d]).groups(groups);
        let out = (gh.out(h, false), gw.out(w, false));
        let fits = groups > 0 && c % groups == 0 && oc % groups == 0 && gh.d > 0 && gw.d > 0;
        let got = ok_or_names(x.conv2d(&weight, bias.then_some(&b), &args), "conv2d");
        if let (Some(oh), Some(ow), true, true) = (out.0, out.1, fits, c > 0 && oc > 0) {
            prop_assert!(got.is_some(), "conv2d refused a valid geometry {:?} {:?}", gh, gw);
            let _ = (oh, ow);
        }
        if let Some(y) = got {
            let (Some(oh), Some(ow)) = out else { return Err(TestCaseError::fail(format!("conv2d accepted {gh:?} {gw:?} on {h}x{w}"))) };
            prop_assert!(fits);
            prop_assert_eq!(y.shape().dims(), &[n, oc, oh, ow]);
            let want = naive_conv(&values(&[n, c, h, w], seed), [n, c, h, w], &values(&[oc, cpg, gh.k, gw.k], seed ^ 1), [oc, cpg, gh.k, gw.k], bias.then_some(&values(&[oc], seed ^ 2)[..]), [gh, gw], groups, [oh, ow]);
            prop_assert!(close(&f64s(&y), &want, dt), "conv2d {:?} vs {:?}", f64s(&y), want);
        }

        // conv1d over the width: a conv2d of height one.
        let x1 = tensor(&[n, c, w], seed, dt);
        let w1 = tensor(&[oc, cpg, gw.k], seed ^ 1, dt);
        let args1 = ConvArgs::default().stride(gw.s).padding(gw.p).dilation(gw.d).groups(groups);
        if let Some(y) = ok_or_names(x1.conv1d(&w1, bias.then_some(&b), &args1), "conv1d") {
            let ow = gw.out(w, false);
            let fits1 = groups > 0 && c % groups == 0 && oc % groups == 0 && gw.d > 0;
            prop_assert!(fits1 && ow.is_some(), "conv1d accepted {:?} on {}", gw, w);
            let one = Geom { k: 1, s: 1, p: 0, d: 1 };
            let want = naive_conv(&values(&[n, c, w], seed), [n, c, 1, w], &values(&[oc, cpg, gw.k], seed ^ 1), [oc, cpg, 1, gw.k], bias.then_some(&values(&[oc], seed ^ 2)[..]), [one, gw], groups, [1, ow.unwrap()]);
            prop_assert!(close(&f64s(&y), &want, dt));
        }
    }

    /// conv_transpose1d/2d with random stride, padding, output padding, dilation and
    /// groups: the naive scatter, or an error naming the op.
    #[test]
    fn conv_transpose_matches_naive(n in 0usize..3, c in 0usize..5, h in 0usize..5, w in 0usize..5, opg in 0usize..3, groups in 0usize..4, gh in geom(), gw in geom(), op in 0usize..3, bias in any::<bool>(), seed in any::<u64>(), dt in dtype()) {
        let oc = opg * groups.max(1);
        let x = tensor(&[n, c, h, w], seed, dt);
        let weight = tensor(&[c, opg, gh.k, gw.k], seed ^ 1, dt);
        let b = tensor(&[oc], seed ^ 2, dt);
        let args = ConvTransposeArgs::default().stride([gh.s, gw.s]).padding([gh.p, gw.p]).dilation([gh.d, gw.d]).output_padding(op).groups(groups);
        // (in - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1.
        let size = |n: usize, g: Geom| -> Option<usize> {
            let full = (n.checked_sub(1)? * g.s + g.d * g.k.checked_sub(1)? + op + 1) as i64 - 2 * g.p as i64;
            (full > 0).then_some(full as usize)
        };
        if let Some(y) = ok_or_names(x.conv_transpose2d(&weight, bias.then_some(&b), &args), "conv_transpose2d") {
            prop_assert!(groups > 0 && c % groups == 0 && gh.s > 0 && gw.s > 0 && gh.d > 0 && gw.d > 0);
            prop_assert!(op < gh.s.max(gh.d) && op < gw.s.max(gw.d), "output_padding {} accepted with {:?} {:?}", op, gh, gw);
            let dims = y.shape().dims().to_vec();
            prop_assert_eq!(&dims[..2], &[n, oc]);
            if let (Some(oh), Some(ow)) = (size(h, gh), size(w, gw)) {
                prop_assert_eq!(&dims[2..], &[oh, ow]);
            }
            let want = naive_conv_transpose(&values(&[n, c, h, w], seed), [n, c, h, w], &values(&[c, opg, gh.k, gw.k], seed ^ 1), [c, opg, gh.k, gw.k], bias.then_some(&values(&[oc], seed ^ 2)[..]), [gh, gw], groups.max(1), [dims[2], dims[3]]);
            prop_assert!(close(&f64s(&y), &want, dt), "conv_transpose2d {:?} vs {:?}", f64s(&y), want);
        }
        let x1 = tensor(&[n, c, w], seed, dt);
        let w1 = tensor(&[c, opg, gw.k], seed ^ 1, dt);
        let args1 = ConvTransposeArgs::default().stride(gw.s).padding(gw.p).dilation(gw.d).output_padding(op).groups(groups);
        if let Some(y) = ok_or_names(x1.conv_transpose1d(&w1, bias.then_some(&b), &args1), "conv_transpose1d") {
            let len = y.shape()[2];
            let one = Geom { k: 1, s: 1, p: 0, d: 1 };
            let want = naive_conv_transpose(&values(&[n, c, w], seed), [n, c, 1, w], &values(&[c, opg, gw.k], seed ^ 1), [c, opg, 1, gw.k], bias.then_some(&values(&[oc], seed ^ 2)[..]), [one, gw], groups.max(1), [1, len]);
            prop_assert!(close(&f64s(&y), &want, dt));
        }
    }

    /// im2col (unfold) against explicit windows, and col2im (fold) against the naive
    /// scatter-add, with random geometry and output sizes: or errors naming the op.
    #[test]
    fn unfold_and_fold_match_naive(n in 0usize..3, c in 0usize..3, h in 0usize..6, w in 0usize..6, gh in geom(), gw in geom(), out_h in 0usize..7, out_w in 0usize..7, seed in any::<u64>(), dt in dtype()) {
        let x = tensor(&[n, c, h, w], seed, dt);
        let args = UnfoldArgs::new([gh.k, gw.k]).stride([gh.s, gw.s]).padding([gh.p, gw.p]).dilation([gh.d, gw.d]);
        let (oh, ow) = (gh.out(h, false), gw.out(w, false));
        let geometry_ok = gh.d > 0 && gw.d > 0;
        if let Some(cols) = ok_or_names(x.im2col(&args), "unfold") {
            let (Some(oh), Some(ow), true) = (oh, ow, geometry_ok) else {
                return Err(TestCaseError::fail(format!("im2col accepted {gh:?} {gw:?} on {h}x{w}")));
            };
            let rows = c * gh.k * gw.k;
            prop_assert_eq!(cols.shape().dims(), &[n, rows, oh * ow]);
            let data = values(&[n, c, h, w], seed);
            let mut want = Vec::new();
            for b in 0..n {
                for ch in 0..c {
                    for i in 0..gh.k {
                        for j in 0..gw.k {
                            for y in 0..oh {
                                for x in 0..ow {
                                    want.push(match (gh.tap(y, i, h), gw.tap(x, j, w)) {
                                        (Some(ih), Some(iw)) => data[((b * c + ch) * h + ih) * w + iw],
                                        _ => 0.0,
                                    });
                                }
                            }
                        }
                    }
                }
            }
            prop_assert_eq!(f64s(&cols), want);
        } else if let (Some(_), Some(_), true) = (oh, ow, geometry_ok && gh.k > 0 && gw.k > 0 && c > 0) {
            prop_assert!(false, "im2col refused {:?} {:?} on {}x{}", gh, gw, h, w);
        }

        // fold: columns [n, c kh kw, L] back onto an out_h x out_w plane.
        let l = gh.out(out_h, false).zip(gw.out(out_w, false)).map_or(1, |(a, b)| a * b);
        let rows = c * gh.k * gw.k;
        let cols = tensor(&[n, rows, l], seed ^ 4, dt);
        if let Some(y) = ok_or_names(cols.col2im([out_h, out_w], &args), "fold") {
            let (Some(oh), Some(ow), true) = (gh.out(out_h, false), gw.out(out_w, false), geometry_ok) else {
                return Err(TestCaseError::fail(format!("col2im accepted {gh:?} {gw:?} onto {out_h}x{out_w}")));
            };
            prop_assert_eq!(y.shape().dims(), &[n, c, out_h, out_w]);
            let data = values(&[n, rows, l], seed ^ 4);
            let mut want = vec![0.0; n * c * out_h * out_w];
            for b in 0..n {
                for ch in 0..c {
                    for i in 0..gh.k {
                        for j in 0..gw.k {
                            for y in 0..oh {
                                for x in 0..ow {
                                    if let (Some(ih), Some(iw)) = (gh.tap(y, i, out_h), gw.tap(x, j, out_w)) {
                                        let r = (ch * gh.k + i) * gw.k + j;
                                        want[((b * c + ch) * out_h + ih) * out_w + iw] += data[(b * rows + r) * l + y * ow + x];
                                    }
                                }
                            }
                        }
                    }
                }
            }
            prop_assert!(close(&f64s(&y), &want, dt));
        }
    }

    /// max_pool1d/2d and avg_pool1d/2d with random kernel, stride, padding, dilation,
    /// ceil_mode, count_include_pad and divisor_override: the explicit windows' max and
    /// mean, or an error naming the op.
    #[test]
    fn pools_match_explicit_windows(n in 0usize..3, c in 0usize..3, h in 0usize..6, w in 0usize..6, gh in geom(), gw in geom(), ceil in any::<bool>(), include_pad in any::<bool>(), divisor in prop::option::of(0usize..4), seed in any::<u64>(), dt in dtype()) {
        let x = tensor(&[n, c, h, w], seed, dt);
        let data = values(&[n, c, h, w], seed);
        // PyTorch: positive kernel, stride and dilation, padding at most half the kernel.
        let ok = |g: Geom| g.k > 0 && g.s > 0 && g.d > 0 && g.p <= g.k / 2;
        let args = MaxPoolArgs::new([gh.k, gw.k]).stride([gh.s, gw.s]).padding([gh.p, gw.p]).dilation([gh.d, gw.d]).ceil_mode(ceil);
        let got = ok_or_names(x.max_pool2d(&args), "max_pool2d");
        let out = gh.out(h, ceil).zip(gw.out(w, ceil));
        if ok(gh) && ok(gw) && n * c * h * w > 0 && out.is_some_and(|(a, b)| a > 0 && b > 0) {
            prop_assert!(got.is_some(), "max_pool2d refused {:?} {:?} on {}x{}", gh, gw, h, w);
        }
        if let Some(y) = got {
            prop_assert!(ok(gh) && ok(gw), "max_pool2d accepted {:?} {:?}", gh, gw);
            let (oh, ow) = out.unwrap();
            prop_assert_eq!(y.shape().dims(), &[n, c, oh, ow]);
            let mut want = Vec::new();
            for plane in 0..n * c {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut m = f64::NEG_INFINITY;
                        for i in 0..gh.k {
                            for j in 0..gw.k {
                                if let (Some(ih), Some(iw)) = (gh.tap(oy, i, h), gw.tap(ox, j, w)) {
                                    m = m.max(data[(plane * h + ih) * w + iw]);
                                }
                            }
                        }
                        want.push(m);
                    }
                }
            }
            prop_assert_eq!(f64s(&y), want);
        }
        let x1 = tensor(&[n, c, w], seed, dt);
        let args1 = MaxPoolArgs::new(gw.k).stride(gw.s).padding(gw.p).dilation(gw.d).ceil_mode(ceil);
        if let Some(y) = ok_or_names(x1.max_pool1d(&args1), "max_pool1d") {
            prop_assert!(ok(gw));
            let d1 = values(&[n, c, w], seed);
            let want: Vec<f64> = (0..n * c).flat_map(|p| {
                let d1 = &d1;
                (0..y.shape()[2]).map(move |o| (0..gw.k).filter_map(|t| gw.tap(o, t, w)).map(|i| d1[p * w + i]).fold(f64::NEG_INFINITY, f64::max))
            }).collect();
            prop_assert_eq!(f64s(&y), want);
        }

        // Average pools have no dilation.
        let (ah, aw) = (Geom { d: 1, ..gh }, Geom { d: 1, ..gw });
        let mut args = AvgPoolArgs::new([ah.k, aw.k]).stride([ah.s, aw.s]).padding([ah.p, aw.p]).ceil_mode(ceil).count_include_pad(include_pad);
        if let Some(d) = divisor {
            args = args.divisor_override(d);
        }
        if let Some(y) = ok_or_names(x.avg_pool2d(&args), "avg_pool2d") {
            prop_assert!(ok(ah) && ok(aw) && divisor != Some(0), "avg_pool2d accepted {:?} {:?} divisor {:?}", ah, aw, divisor);
            let (Some(oh), Some(ow)) = (ah.out(h, ceil), aw.out(w, ceil)) else {
                return Err(TestCaseError::fail(format!("avg_pool2d accepted {ah:?} {aw:?} on {n}x{c}x{h}x{w}: {:?}", y.shape())));
            };
            prop_assert_eq!(y.shape().dims(), &[n, c, oh, ow]);
            // PyTorch's window: clipped to the padded input, then to the input.
            let window = |o: usize, g: Geom, len: usize| {
                let start = (o * g.s) as i64 - g.p as i64;
                let end = (start + g.k as i64).min((len + g.p) as i64);
                let padded = (end - start) as usize;
                (start.max(0) as usize, end.min(len as i64).max(0) as usize, padded)
            };
            let mut want = Vec::new();
            for plane in 0..n * c {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (y0, y1, py) = window(oy, ah, h);
                        let (x0, x1, px) = window(ox, aw, w);
                        let sum: f64 = (y0..y1).flat_map(|i| (x0..x1).map(move |j| (i, j))).map(|(i, j)| data[(plane * h + i) * w + j]).sum();
                        let count = match divisor {
                            Some(d) => d,
                            None if include_pad => py * px,
                            None => (y1.saturating_sub(y0)) * (x1.saturating_sub(x0)),
                        };
                        want.push(sum / count as f64);
                    }
                }
            }
            prop_assert!(close(&f64s(&y), &want, dt), "avg_pool2d {:?} vs {:?}", f64s(&y), want);
        }
        let args1 = AvgPoolArgs::new(aw.k).stride(aw.s).padding(aw.p).ceil_mode(ceil).count_include_pad(include_pad);
        if ok_or_names(x1.avg_pool1d(&args1), "avg_pool1d").is_some() {
            prop_assert!(ok(aw));
        }
    }

    /// Adaptive pools against their explicit windows `[floor(i in / out), ceil((i + 1) in /
    /// out))`, for any input and output size: or an error naming the op.
    #[test]
    fn adaptive_pools_match_explicit_windows(s in shape(4), oh in 0usize..5, ow in 0usize..5, seed in any::<u64>(), dt in dtype()) {
        let x = tensor(&s, seed, dt);
        let data = values(&s, seed);
        let window = |i: usize, input: usize, out: usize| (i * input / out, ((i + 1) * input).div_ceil(out));
        let planes_of = |spatial: usize| -> Option<usize> { (s.len() == spatial + 1 || s.len() == spatial + 2).then(|| s[..s.len() - spatial].iter().product()) };
        for max in [false, true] {
            let name = if max { "adaptive_max_pool2d" } else { "adaptive_avg_pool2d" };
            let got = if max { x.adaptive_max_pool2d([oh, ow]) } else { x.adaptive_avg_pool2d([oh, ow]) };
            if let Some(y) = ok_or_names(got, name) {
                let planes = planes_of(2);
                prop_assert!(planes.is_some(), "{} accepted {:?}", name, s);
                let (h, w) = (s[s.len() - 2], s[s.len() - 1]);
                let mut want = Vec::new();
                for p in 0..planes.unwrap() {
                    for i in 0..oh {
                        for j in 0..ow {
                            let ((y0, y1), (x0, x1)) = (window(i, h, oh), window(j, w, ow));
                            let win: Vec<f64> = (y0..y1).flat_map(|a| (x0..x1).map(move |b| (a, b))).map(|(a, b)| data[(p * h + a) * w + b]).collect();
                            want.push(if max { win.iter().copied().fold(f64::NEG_INFINITY, f64::max) } else { win.iter().sum::<f64>() / win.len() as f64 });
                        }
                    }
                }
                prop_assert!(close(&f64s(&y), &want, dt), "{} {:?} -> {:?}: {:?} vs {:?}", name, s, [oh, ow], f64s(&y), want);
            }
        }
        if let Some(y) = ok_or_names(x.adaptive_avg_pool1d(ow), "adaptive_avg_pool1d") {
            let planes = planes_of(1);
            prop_assert!(planes.is_some(), "adaptive_avg_pool1d accepted {:?}", s);
            let w = s[s.len() - 1];
            let want: Vec<f64> = (0..planes.unwrap()).flat_map(|p| {
                let data = &data;
                (0..ow).map(move |j| { let (a, b) = window(j, w, ow); data[p * w + a..p * w + b].iter().sum::<f64>() / (b - a) as f64 })
            }).collect();
            prop_assert!(close(&f64s(&y), &want, dt));
        }
    }

    /// interpolate by size or scale factor in every mode, with and without align_corners:
    /// nearest matches PyTorch's index rule, and every mode keeps a constant input constant
    /// and gives the requested size; invalid combinations are errors naming the op.
    #[test]
    fn interpolate_matches_nearest_rule_and_keeps_constants(s in shape(4), size in prop::collection::vec(0usize..6, 0..3), scale in prop::collection::vec(prop_oneof![Just(0.5), Just(1.0), Just(2.0), Just(1.7), Just(0.0), Just(-1.0)], 0..3), by_size in any::<bool>(), mode in 0usize..3, align in prop::option::of(any::<bool>()), seed in any::<u64>(), dt in dtype()) {
        let x = tensor(&s, seed, dt);
        let mode = [InterpolateMode::Nearest, InterpolateMode::Linear, InterpolateMode::Bilinear][mode];
        let mut args = if by_size { InterpolateArgs::size(size.clone()) } else { InterpolateArgs::scale_factor(scale.clone()) };
        args.mode = mode;
        args.align_corners = align;
        let Some(y) = ok_or_names(x.interpolate(&args), "interpolate") else { return Ok(()) };
        let spatial = match mode { InterpolateMode::Bilinear => 2, InterpolateMode::Linear => 1, InterpolateMode::Nearest => s.len().saturating_sub(2) };
        prop_assert!(s.len() == spatial + 2 && spatial > 0, "interpolate {:?} accepted rank {}", mode, s.len());
        prop_assert!(mode != InterpolateMode::Nearest || align.is_none(), "nearest accepted align_corners");
        let inputs = &s[2..];
        let outs = y.shape().dims()[2..].to_vec();
        prop_assert_eq!(&y.shape().dims()[..2], &s[..2]);
        let n_given = if by_size { size.len() } else { scale.len() };
        prop_assert!(n_given == 1 || n_given == spatial, "{} values for {} dimensions", n_given, spatial);
        for (d, (&i, &o)) in inputs.iter().zip(&outs).enumerate() {
            let want = if by_size { size[if size.len() == 1 { 0 } else { d }] } else { (i as f64 * scale[if scale.len() == 1 { 0 } else { d }]).floor() as usize };
            prop_assert_eq!(o, want, "output size of dimension {}", d);
        }
        let data = values(&s, seed);
        if mode == InterpolateMode::Nearest {
            let factor = |d: usize| if by_size { inputs[d] as f64 / outs[d] as f64 } else { 1.0 / scale[if scale.len() == 1 { 0 } else { d }] };
            let want: Vec<f64> = indices(y.shape().dims()).iter().map(|idx| {
                let mut src = idx.clone();
                for d in 0..spatial {
                    src[2 + d] = ((idx[2 + d] as f64 * factor(d)).floor() as usize).min(inputs[d] - 1);
                }
                at(&data, &s, &src)
            }).collect();
            prop_assert_eq!(f64s(&y), want);
        }
        // Any mode reproduces a constant input.
        let ones = Tensor::ones(s.clone(), dt).unwrap();
        let y1 = ones.interpolate(&args).unwrap();
        prop_assert!(f64s(&y1).iter().all(|v| (v - 1.0).abs() < 1e-6), "{:?} of ones: {:?}", mode, f64s(&y1));
    }

    /// split, split_sizes and chunk cut pieces that cat back to the input; slice with any
    /// step matches a naive gather; pad, repeat, tril and triu match naive loops.
    #[test]
    fn joins_and_slices_match_naive(s in shape(3), dim in -4i64..4, size in 0usize..4, sizes in prop::collection::vec(0usize..4, 0..4), start in 0usize..6, end in 0usize..6, step in 0usize..3, pads in prop::collection::vec((0usize..3, 0usize..3), 0..4), repeats in prop::collection::vec(0usize..3, 0..5), diag in -3i64..3, seed in any::<u64>(), dt in dtype()) {
        let t = tensor(&s, seed, dt);
        let data = values(&s, seed);
        let d = resolve(dim, s.len());
        let rejoin = |pieces: Vec<Tensor>, d: usize| -> Vec<f64> {
            let refs: Vec<&Tensor> = pieces.iter().collect();
            if refs.is_empty() { Vec::new() } else { f64s(&Tensor::cat(&refs, d).unwrap()) }
        };
        if let Some(pieces) = ok_or_names(t.split(size, dim), "split") {
            let d = d.expect("split accepted an invalid dim");
            prop_assert!(size > 0 || s[d] == 0, "split accepted size 0");
            prop_assert!(pieces.iter().all(|p| p.shape()[d] <= size.max(1)));
            if s[d] > 0 { prop_assert_eq!(rejoin(pieces, d), data.clone()); }
        } else {
            prop_assert!(d.is_none() || size == 0, "split refused size {} on {:?} dim {}", size, s, dim);
        }
        if let Some(pieces) = ok_or_names(t.split_sizes(&sizes, dim), "split_sizes") {
            let d = d.expect("split_sizes accepted an invalid dim");
            prop_assert_eq!(sizes.iter().sum::<usize>(), s[d]);
            prop_assert_eq!(pieces.iter().map(|p| p.shape()[d]).collect::<Vec<_>>(), sizes.clone());
            if !pieces.is_empty() { prop_assert_eq!(rejoin(pieces, d), data.clone()); }
        } else {
            prop_assert!(d.is_none_or(|d| sizes.iter().sum::<usize>() != s[d]), "split_sizes refused {:?} on {:?}", sizes, s);
        }
        if let Some(pieces) = ok_or_names(t.chunk(size, dim), "chunk") {
            let d = d.expect("chunk accepted an invalid dim");
            prop_assert!(size > 0 && pieces.len() <= size);
            if s[d] > 0 { prop_assert_eq!(rejoin(pieces, d), data.clone()); }
        } else {
            prop_assert!(d.is_none() || size == 0);
        }
        if let Some(sl) = ok_or_names(t.slice(dim, start, end, step), "slice") {
            let d = d.expect("slice accepted an invalid dim");
            prop_assert!(step > 0);
            let (a, b) = (start.min(s[d]), end.min(s[d]).max(start.min(s[d])));
            let picks: Vec<usize> = (a..b).step_by(step).collect();
            let want: Vec<f64> = indices(sl.shape().dims()).iter().map(|i| { let mut src = i.clone(); src[d] = picks[i[d]]; at(&data, &s, &src) }).collect();
            prop_assert_eq!(sl.shape()[d], picks.len());
            prop_assert_eq!(f64s(&sl), want);
        }
        // pad: pairs for the trailing dimensions, PyTorch's order (last dimension first).
        if let Some(p) = ok_or_names(t.pad(&pads, 0.5), "pad") {
            prop_assert!(pads.len() <= s.len());
            let mut lo = vec![0; s.len()];
            let mut out = s.clone();
            for (k, &(a, b)) in pads.iter().enumerate() {
                let d = s.len() - 1 - k;
                lo[d] = a;
                out[d] += a + b;
            }
            prop_assert_eq!(p.shape().dims(), &out[..]);
            let want: Vec<f64> = indices(&out).iter().map(|i| {
                let src: Option<Vec<usize>> = i.iter().zip(&lo).zip(&s).map(|((&i, &l), &e)| i.checked_sub(l).filter(|&x| x < e)).collect();
                src.map_or(0.5, |src| at(&data, &s, &src))
            }).collect();
            prop_assert_eq!(f64s(&p), want);
        } else {
            prop_assert!(pads.len() > s.len());
        }
        if let Some(r) = ok_or_names(t.repeat(&repeats), "repeat") {
            prop_assert!(repeats.len() >= s.len());
            let lead = repeats.len() - s.len();
            let out: Vec<usize> = repeats.iter().enumerate().map(|(k, &r)| r * if k < lead { 1 } else { s[k - lead] }).collect();
            prop_assert_eq!(r.shape().dims(), &out[..]);
            let want: Vec<f64> = indices(&out).iter().map(|i| { let src: Vec<usize> = i[lead..].iter().zip(&s).map(|(&i, &e)| i % e).collect(); at(&data, &s, &src) }).collect();
            prop_assert_eq!(f64s(&r), want);
        } else {
            prop_assert!(repeats.len() < s.len());
        }
        for upper in [false, true] {
            let name = if upper { "triu" } else { "tril" };
            let got = if upper { t.triu(diag) } else { t.tril(diag) };
            if let Some(tr) = ok_or_names(got, name) {
                prop_assert!(s.len() >= 2);
                let r = s.len();
                let want: Vec<f64> = indices(&s).iter().map(|i| {
                    let (row, col) = (i[r - 2] as i64, i[r - 1] as i64);
                    let keep = if upper { col - row >= diag } else { col - row <= diag };
                    if keep { at(&data, &s, i) } else { 0.0 }
                }).collect();
                prop_assert_eq!(f64s(&tr), want);
            } else {
                prop_assert!(s.len() < 2);
            }
        }
    }

    /// masked_fill and where_cond with masks and operands of random (broadcasting or not)
    /// shapes and dtypes: the naive select, or an error naming the op.
    #[test]
    fn masks_and_where_match_naive(s in shape(3), ms in shape(3), os in shape(3), mask_dtype in prop_oneof![Just(DType::U8), Just(DType::F32), Just(DType::I64)], seed in any::<u64>(), dt in dtype()) {
        let t = tensor(&s, seed, dt);
        let bits: Vec<f64> = values(&ms, seed ^ 1).iter().map(|v| f64::from(u8::from(*v > 0.0))).collect();
        let mask = Tensor::from_vec(bits.clone(), ms.clone()).unwrap().to_dtype(mask_dtype);
        let bshape = |a: &[usize], b: &[usize]| -> Option<Vec<usize>> {
            let rank = a.len().max(b.len());
            let dim = |s: &[usize], d: usize| if d + s.len() >= rank { s[d + s.len() - rank] } else { 1 };
            (0..rank).map(|d| match (dim(a, d), dim(b, d)) { (x, y) if x == y || y == 1 => Some(x), (1, y) => Some(y), _ => None }).collect()
        };
        let bat = |data: &[f64], shape: &[usize], idx: &[usize]| {
            let lead = idx.len() - shape.len();
            let own: Vec<usize> = shape.iter().enumerate().map(|(d, &e)| if e == 1 { 0 } else { idx[lead + d] }).collect();
            at(data, shape, &own)
        };
        let data = values(&s, seed);
        if let Some(f) = ok_or_names(t.masked_fill(&mask, 9.0), "masked_fill") {
            prop_assert_eq!(mask_dtype, DType::U8, "masked_fill accepted a {:?} mask", mask_dtype);
            // ember's masked_fill keeps self's shape: the mask broadcasts to it.
            let out = s.clone();
            prop_assert_eq!(bshape(&s, &ms), Some(s.clone()), "masked_fill accepted a mask of shape {:?} for {:?}", ms, s);
            prop_assert_eq!(f.shape().dims(), &out[..]);
            let want: Vec<f64> = indices(&out).iter().map(|i| if bat(&bits, &ms, i) == 1.0 { 9.0 } else { bat(&data, &s, i) }).collect();
            prop_assert_eq!(f64s(&f), want);
        } else {
            prop_assert!(mask_dtype != DType::U8 || bshape(&s, &ms) != Some(s.clone()));
        }
        let other = tensor(&os, seed ^ 2, dt);
        let odata = values(&os, seed ^ 2);
        if let Some(wh) = ok_or_names(mask.where_cond(&t, &other), "where") {
            let out = bshape(&ms, &s).and_then(|o| bshape(&o, &os)).expect("where accepted shapes that do not broadcast");
            prop_assert_eq!(wh.shape().dims(), &out[..]);
            let want: Vec<f64> = indices(&out).iter().map(|i| if bat(&bits, &ms, i) != 0.0 { bat(&data, &s, i) } else { bat(&odata, &os, i) }).collect();
            prop_assert_eq!(f64s(&wh), want);
        }
    }

    /// prod, min, argmin, argmax, std and the squeeze/flatten views over random (often
    /// invalid) dims, with and without keepdim: the naive reduction or an error naming it.
    #[test]
    fn more_reductions_match_naive(s in shape(4), dim in -6i64..6, end in -6i64..6, keep in any::<bool>(), unbiased in any::<bool>(), seed in any::<u64>(), dt in dtype()) {
        let t = tensor(&s, seed, dt);
        let data = values(&s, seed);
        let d = resolve(dim, s.len().max(1));
        // The naive reduction of `f` along `d` (a scalar tensor reduces over its one value).
        let naive = |f: &dyn Fn(&[f64]) -> f64| -> (Vec<usize>, Vec<f64>) {
            if s.is_empty() {
                return (vec![], vec![f(&data)]);
            }
            let d = d.unwrap();
            let mut out = s.clone();
            out[d] = 1;
            let vals = indices(&out).iter().map(|i| {
                let lane: Vec<f64> = (0..s[d]).map(|k| { let mut j = i.clone(); j[d] = k; at(&data, &s, &j) }).collect();
                f(&lane)
            }).collect();
            if !keep { out.remove(d); }
            (out, vals)
        };
        let cases: [(&str, Result<Tensor>, &Lane<'_>); 6] = [
            ("prod", t.prod(dim, keep), &|l| l.iter().product()),
            ("min", t.min(dim, keep), &|l| l.iter().copied().fold(f64::INFINITY, f64::min)),
            ("std", t.std(dim, unbiased, keep), &|l| {
                let n = l.len() as f64;
                let m = l.iter().sum::<f64>() / n;
                // No degrees of freedom in an empty lane: 0 / 0, as PyTorch gives.
                (l.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - if unbiased { 1.0 } else { 0.0 }).max(0.0)).sqrt()
            }),
            ("argmin", t.argmin(dim, keep), &|l| l.iter().enumerate().fold((0, f64::INFINITY), |(bi, bv), (i, &v)| if v < bv { (i, v) } else { (bi, bv) }).0 as f64),
            ("argmax", t.argmax(dim, keep), &|l| l.iter().enumerate().fold((0, f64::NEG_INFINITY), |(bi, bv), (i, &v)| if v > bv { (i, v) } else { (bi, bv) }).0 as f64),
            ("mean", t.mean(dim, keep), &|l| l.iter().sum::<f64>() / l.len() as f64),
        ];
        let empty_lane = d.is_some_and(|d| s.get(d) == Some(&0));
        for (name, got, f) in cases {
            match ok_or_names(got, name) {
                Some(r) => {
                    prop_assert!(d.is_some(), "{} accepted dim {} of {:?}", name, dim, s);
                    prop_assert!(!(empty_lane && ["min", "argmin", "argmax"].contains(&name)), "{} of an empty lane", name);
                    let (shape, want) = naive(f);
                    prop_assert_eq!(r.shape().dims(), &shape[..], "{}", name);
                    prop_assert!(close(&f64s(&r), &want, dt), "{} {:?} dim {}: {:?} vs {:?}", name, s, dim, f64s(&r), want);
                }
                None => prop_assert!(d.is_none() || (empty_lane && ["min", "argmin", "argmax"].contains(&name)), "{} refused dim {} of {:?}", name, dim, s),
            }
        }
        if let Some(sq) = ok_or_names(t.squeeze(dim), "squeeze") {
            let mut want = s.clone();
            if let Some(d) = d.filter(|&d| s.get(d) == Some(&1)) { want.remove(d); }
            prop_assert_eq!(sq.shape().dims(), &want[..]);
            prop_assert_eq!(f64s(&sq), data.clone());
        } else {
            // A 0-d tensor has no dimension to squeeze (PyTorch would accept 0 and -1).
            prop_assert!(d.is_none() || s.is_empty());
        }
        if let Some(fl) = ok_or_names(t.flatten(dim, end), "flatten") {
            prop_assert_eq!(f64s(&fl), data.clone());
            if let (Some(a), Some(b), false) = (d, resolve(end, s.len().max(1)), s.is_empty()) {
                prop_assert!(a <= b);
                let mut want: Vec<usize> = s[..a].to_vec();
                want.push(s[a..=b].iter().product());
                want.extend_from_slice(&s[b + 1..]);
                prop_assert_eq!(fl.shape().dims(), &want[..]);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Geometry whose result cannot be held (sides from 2^31, so every output has more than
    /// ember's 2^60 elements) is refused with an error naming the op, before any output-sized
    /// work: never an overflow, an abort or an exhausted memory.
    #[test]
    fn huge_geometry_is_refused(a in 1usize << 31..1usize << 32, b in 1usize << 31..1usize << 32, big in 1usize << 31..1usize << 40, dt in dtype()) {
        let x = tensor(&[1, 1, 2, 2], 0, dt);
        let w = tensor(&[1, 1, 1, 1], 1, dt);
        prop_assert!(ok_or_names(x.interpolate(&InterpolateArgs::size([a, b])), "interpolate").is_none());
        prop_assert!(ok_or_names(x.adaptive_avg_pool2d([a, b]), "adaptive_avg_pool2d").is_none());
        prop_assert!(ok_or_names(x.adaptive_max_pool2d([a, b]), "adaptive_max_pool2d").is_none());
        prop_assert!(ok_or_names(x.im2col(&UnfoldArgs::new(1).padding(big)), "unfold").is_none());
        prop_assert!(ok_or_names(tensor(&[1, 1, 1], 2, dt).col2im([a, b], &UnfoldArgs::new(1)), "fold").is_none());
        prop_assert!(ok_or_names(x.conv2d(&w, None, &ConvArgs::default().padding(big)), "conv2d").is_none());
        prop_assert!(ok_or_names(x.conv_transpose2d(&w, None, &ConvTransposeArgs::default().stride(big)), "conv_transpose2d").is_none());
    }
}

/// `std` resolves its own dimensions: a bad one is an error naming `std`, not the `var` it
/// is computed from (found by `more_reductions_match_naive`).
#[test]
fn std_errors_name_std() {
    let t = Tensor::zeros([2, 3], DType::F32).unwrap();
    let msg = t.std(5, true, false).unwrap_err().to_string();
    assert!(msg.starts_with("std:"), "{msg}");
}

/// channel_norm of channels with zero-size planes (`[n, c, 0]`) once read the first element
/// of an empty input and panicked (found through group_norm in `crates/nn/tests/prop_nn.rs`):
/// the statistics of nothing are NaN and the output is empty, forward and backward.
#[test]
fn channel_norm_of_zero_size_planes_is_empty() {
    for dt in [DType::F32, DType::F64] {
        let x = Tensor::zeros([1, 2, 0], dt).unwrap();
        let (y, mean, var) = x.channel_norm(None, None, 1e-5).unwrap();
        assert_eq!(y.shape().dims(), &[1, 2, 0]);
        assert!(mean.to_vec_f64().unwrap().iter().all(|m| m.is_nan()), "{mean:?}");
        let (gx, _, _) = x.channel_norm_backward(&y, &mean, &var, None, 1e-5).unwrap();
        assert_eq!(gx.shape().dims(), &[1, 2, 0]);
    }
}

/// Outputs of interpolate and the adaptive pools too large to hold are refused before the
/// per-axis maps (as long as the output's sides) are built: a 2^31 x 2^31 output once built
/// two 2^31-entry maps and ran the process out of memory.
#[test]
fn huge_resampling_outputs_are_refused() {
    let x = Tensor::ones([1, 1, 2, 2], DType::F32).unwrap();
    let big = 1usize << 31;
    let refused = |r: Result<Tensor>, op: &str| {
        let msg = r.expect_err("a huge output is refused").to_string();
        assert!(msg.starts_with(op) && msg.contains("too many elements"), "{msg}");
    };
    refused(x.interpolate(&InterpolateArgs::size([big, big])), "interpolate");
    refused(x.adaptive_avg_pool2d([big, big]), "adaptive_avg_pool2d");
    refused(x.adaptive_max_pool2d([big, big]), "adaptive_max_pool2d");
}

/// An output within ember's element limit but far beyond memory, with a side of 2^31
/// (`[1, 1, 2^31, 2^20]`: 2^51 elements), built that side's 2^31-entry map (32 GiB and
/// more) before the output's allocation was refused; the output is now reserved first, and
/// the refusal is an allocation error naming the op, with nothing large built.
#[test]
fn countable_resampling_outputs_beyond_memory_are_refused_before_their_maps() {
    let x = Tensor::ones([1, 1, 4, 4], DType::F32).unwrap();
    let (long, wide) = (1usize << 31, 1usize << 20);
    let refused = |r: Result<Tensor>, op: &str| {
        let msg = r.expect_err("an output beyond memory is refused").to_string();
        assert!(msg.starts_with(op) && msg.contains("cannot allocate"), "{msg}");
    };
    for mode in [InterpolateMode::Nearest, InterpolateMode::Bilinear] {
        refused(x.interpolate(&InterpolateArgs::size([long, wide]).mode(mode)), "interpolate");
        refused(x.interpolate(&InterpolateArgs::size([wide, long]).mode(mode)), "interpolate");
    }
    refused(x.interpolate(&InterpolateArgs::scale_factor([long as f64 / 4.0, wide as f64 / 4.0])), "interpolate");
    refused(x.adaptive_avg_pool2d([long, wide]), "adaptive_avg_pool2d");
    refused(x.adaptive_max_pool2d([wide, long]), "adaptive_max_pool2d");
    // 2^30 one-element planes behind a broadcast, each pooled to 2^20 outputs.
    let many = Tensor::ones([1, 1, 1, 1], DType::F32).unwrap().expand([1usize << 20, 1usize << 10, 1, 1]).unwrap();
    refused(many.adaptive_avg_pool2d([wide, 1]), "adaptive_avg_pool2d");
    // Long sides whose outputs fit still run.
    let line = Tensor::ones([1, 1, 4], DType::F64).unwrap();
    let y = line.interpolate(&InterpolateArgs::size([wide]).mode(InterpolateMode::Linear)).unwrap();
    assert_eq!(y.shape().dims(), &[1, 1, wide]);
}

/// unfold with a padding of 2^31 has a 2^32 x 2^32 grid of blocks: its count overflowed
/// (a panic in checked builds, a wrapped size otherwise); it is an error naming unfold.
#[test]
fn unfold_with_a_huge_block_grid_is_refused() {
    let x = Tensor::ones([1, 1, 2, 2], DType::F32).unwrap();
    let msg = x.im2col(&UnfoldArgs::new(1).padding(1usize << 31)).unwrap_err().to_string();
    assert!(msg.starts_with("unfold:") && msg.contains("too large"), "{msg}");
}
