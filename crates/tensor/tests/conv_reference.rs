//! Convolutions, transposed convolutions, their weight gradient, `unfold` and `fold`
//! against direct loops over the definitions (PyTorch's), in `f64` and `f32`, on
//! contiguous and strided operands, with strides, padding (`"same"` with even kernels
//! too), dilation, groups (depthwise included), unbatched and 1-d inputs, and sizes that
//! reach the kernels' parallel and blocked paths.
//!
//! `f64` results must agree to `1e-12` of the sum of the magnitudes of the terms, `f32`
//! ones to `1e-5` of it.

use ember_tensor::ops::conv::{ConvGeometry, conv_plan};
use ember_tensor::{ConvArgs, ConvTransposeArgs, DType, Padding, Tensor, UnfoldArgs};

/// `n` values in `[-1, 1)` from a fixed sequence.
fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(data(shape.iter().product(), seed), shape).unwrap()
}

/// The same values through a non-contiguous layout: stored with the last two dimensions
/// swapped and read back through a transpose.
fn strided(t: &Tensor) -> Tensor {
    let r = t.rank();
    let s = t.transpose(r - 2, r - 1).unwrap().contiguous().transpose(r - 2, r - 1).unwrap();
    assert!(!s.is_contiguous() || t.shape()[r - 1] == 1 || t.shape()[r - 2] == 1);
    s
}

/// Values and the magnitude sums the tolerance scales with.
struct Expected {
    values: Vec<f64>,
    scale: Vec<f64>,
}

#[track_caller]
fn assert_close(what: &str, got: &Tensor, want: &Expected, shape: &[usize]) {
    assert_eq!(got.shape(), shape, "{what}: shape");
    let tol = if got.dtype() == DType::F64 { 1e-12 } else { 1e-5 };
    let got = got.to_vec_f64().unwrap();
    for (i, ((g, w), s)) in got.iter().zip(&want.values).zip(&want.scale).enumerate() {
        assert!((g - w).abs() <= tol * s.max(1e-30), "{what}: element {i} is {g}, expected {w}");
    }
}

/// One convolution problem: shapes and arguments, 2-d.
#[derive(Clone, Copy, Debug)]
struct Case {
    n: usize,
    c: usize,
    hw: [usize; 2],
    o: usize,
    k: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
}

// One argument per column of the `CASES` table.
#[allow(clippy::too_many_arguments)]
const fn case(
    n: usize,
    c: usize,
    hw: [usize; 2],
    o: usize,
    k: [usize; 2],
    stride: usize,
    padding: usize,
    dilation: usize,
    groups: usize,
) -> Case {
    Case { n, c, hw, o, k, stride: [stride; 2], padding: [padding; 2], dilation: [dilation; 2], groups }
}

const CASES: &[Case] = &[
    case(2, 3, [7, 6], 4, [3, 3], 1, 1, 1, 1),
    case(1, 4, [9, 8], 6, [3, 2], 2, 1, 1, 2),
    case(2, 4, [8, 9], 4, [3, 3], 1, 2, 2, 4), // depthwise, dilated
    case(3, 2, [5, 5], 3, [1, 1], 1, 0, 1, 1), // 1x1, read directly
    case(2, 4, [6, 7], 8, [1, 1], 2, 0, 1, 2), // 1x1 strided
    case(1, 1, [4, 4], 2, [4, 4], 1, 0, 1, 1), // kernel as large as the input
    case(2, 3, [5, 4], 2, [2, 3], 3, 2, 1, 1), // stride larger than the kernel
    case(0, 3, [5, 5], 2, [3, 3], 1, 1, 1, 1), // empty batch
    // Large enough for the parallel paths and several column blocks per image.
    case(3, 16, [30, 31], 12, [3, 3], 1, 1, 1, 1),
    case(2, 32, [20, 20], 32, [3, 3], 2, 1, 1, 32),
];

fn args(c: &Case) -> ConvArgs<2> {
    ConvArgs::default().stride(c.stride).padding(c.padding).dilation(c.dilation).groups(c.groups)
}

fn geometry(c: &Case) -> ConvGeometry {
    let input = [c.n, c.c, c.hw[0], c.hw[1]];
    let weight = [c.o, c.c / c.groups, c.k[0], c.k[1]];
    conv_plan("conv2d", &input, &weight, None, &args(c)).unwrap().geometry
}

/// The input row and column of output `(y, x)`, tap `(i, j)`, if inside.
fn source(g: &ConvGeometry, y: usize, x: usize, i: usize, j: usize) -> Option<(usize, usize)> {
    let w = &g.window;
    let iy = (y * w.stride[0] + i * w.dilation[0]) as i64 - w.padding[0] as i64;
    let ix = (x * w.stride[1] + j * w.dilation[1]) as i64 - w.padding[1] as i64;
    let inside = (0..w.input[0] as i64).contains(&iy) && (0..w.input[1] as i64).contains(&ix);
    inside.then_some((iy as usize, ix as usize))
}

/// Calls `f(n, o, y, x, c, i, j, (iy, ix))` for every term of the convolution sum.
fn for_each_term(g: &ConvGeometry, n: usize, mut f: impl FnMut([usize; 7], (usize, usize))) {
    let (cg, og) = (g.in_channels / g.groups, g.out_channels / g.groups);
    for b in 0..n {
        for o in 0..g.out_channels {
            let group = o / og;
            for y in 0..g.window.output[0] {
                for x in 0..g.window.output[1] {
                    for ci in 0..cg {
                        for i in 0..g.window.kernel[0] {
                            for j in 0..g.window.kernel[1] {
                                if let Some(src) = source(g, y, x, i, j) {
                                    f([b, o, y, x, group * cg + ci, i, j], src);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn at(shape: &[usize], idx: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |a, (&i, &d)| a * d + i)
}

fn naive_conv(g: &ConvGeometry, n: usize, x: &[f64], w: &[f64], bias: Option<&[f64]>) -> Expected {
    let out = g.output_shape(n);
    let (xs, ws) = (g.input_shape(n), g.weight_shape());
    let cg = g.in_channels / g.groups;
    let mut values = vec![0.0; out.numel()];
    let mut scale = vec![0.0; out.numel()];
    for_each_term(g, n, |[b, o, y, xx, c, i, j], (iy, ix)| {
        let term = x[at(&xs, &[b, c, iy, ix])] * w[at(&ws, &[o, c % cg, i, j])];
        let p = at(&out, &[b, o, y, xx]);
        values[p] += term;
        scale[p] += term.abs();
    });
    if let Some(bias) = bias {
        for (p, v) in values.iter_mut().enumerate() {
            let o = p / g.window.positions() % g.out_channels;
            *v += bias[o];
            scale[p] += bias[o].abs();
        }
    }
    Expected { values, scale }
}

/// The transposed convolution from its own definition: every input element scatters
/// `x * w` to the output positions its taps reach.
fn naive_transpose(g: &ConvGeometry, n: usize, y: &[f64], w: &[f64], bias: Option<&[f64]>) -> Expected {
    let out = g.input_shape(n);
    let (ys, ws) = (g.output_shape(n), g.weight_shape());
    let cg = g.in_channels / g.groups;
    let mut values = vec![0.0; out.numel()];
    let mut scale = vec![0.0; out.numel()];
    for_each_term(g, n, |[b, o, yy, xx, c, i, j], (iy, ix)| {
        let term = y[at(&ys, &[b, o, yy, xx])] * w[at(&ws, &[o, c % cg, i, j])];
        let p = at(&out, &[b, c, iy, ix]);
        values[p] += term;
        scale[p] += term.abs();
    });
    if let Some(bias) = bias {
        let plane = g.window.input[0] * g.window.input[1];
        for (p, v) in values.iter_mut().enumerate() {
            let c = p / plane % g.in_channels;
            *v += bias[c];
            scale[p] += bias[c].abs();
        }
    }
    Expected { values, scale }
}

fn naive_weight_grad(g: &ConvGeometry, n: usize, x: &[f64], gy: &[f64]) -> Expected {
    let out = g.weight_shape();
    let (xs, ys) = (g.input_shape(n), g.output_shape(n));
    let cg = g.in_channels / g.groups;
    let mut values = vec![0.0; out.numel()];
    let mut scale = vec![0.0; out.numel()];
    for_each_term(g, n, |[b, o, y, xx, c, i, j], (iy, ix)| {
        let term = x[at(&xs, &[b, c, iy, ix])] * gy[at(&ys, &[b, o, y, xx])];
        let p = at(&out, &[o, c % cg, i, j]);
        values[p] += term;
        scale[p] += term.abs();
    });
    Expected { values, scale }
}

#[test]
fn kernels_match_the_definitions() {
    for (k, c) in CASES.iter().enumerate() {
        let g = geometry(c);
        let seed = 10 * k as u64;
        let x = tensor(&g.input_shape(c.n), seed);
        let w = tensor(&g.weight_shape(), seed + 1);
        let b = tensor(&[c.o], seed + 2);
        let gy = tensor(&g.output_shape(c.n), seed + 3);
        let bt = tensor(&[c.c], seed + 4);
        let (xv, wv, bv, gv, btv) = (
            x.to_vec_f64().unwrap(),
            w.to_vec_f64().unwrap(),
            b.to_vec_f64().unwrap(),
            gy.to_vec_f64().unwrap(),
            bt.to_vec_f64().unwrap(),
        );
        let forward = naive_conv(&g, c.n, &xv, &wv, Some(&bv));
        let forward_nb = naive_conv(&g, c.n, &xv, &wv, None);
        let transposed = naive_transpose(&g, c.n, &gv, &wv, Some(&btv));
        let weight_grad = naive_weight_grad(&g, c.n, &xv, &gv);
        for dtype in [DType::F64, DType::F32] {
            let layouts = [
                ("contiguous", x.to_dtype(dtype), w.to_dtype(dtype), gy.to_dtype(dtype)),
                ("strided", strided(&x.to_dtype(dtype)), strided(&w.to_dtype(dtype)), strided(&gy.to_dtype(dtype))),
            ];
            for (layout, x, w, gy) in layouts {
                let what = |op: &str| format!("{op} of {c:?}, {layout} {dtype}");
                let (b, bt) = (b.to_dtype(dtype), bt.to_dtype(dtype));
                let y = x.conv2d(&w, Some(&b), &args(c)).unwrap();
                assert_close(&what("conv2d"), &y, &forward, &g.output_shape(c.n));
                let y = x.conv2d_resolved(&w, None, &g).unwrap();
                assert_close(&what("conv2d without bias"), &y, &forward_nb, &g.output_shape(c.n));
                let t = gy.conv_transpose2d_resolved(&w, Some(&bt), &g).unwrap();
                assert_close(&what("conv_transpose2d"), &t, &transposed, &g.input_shape(c.n));
                let gw = x.conv2d_weight_grad(&gy, &g).unwrap();
                assert_close(&what("weight gradient"), &gw, &weight_grad, &g.weight_shape());
            }
        }
    }
}

#[test]
fn public_conv_transpose_matches_the_definition() {
    // PyTorch's conv_transpose2d: input [N, in, h, w], weight [in, out / groups, kh, kw].
    let x = tensor(&[2, 4, 5, 4], 1);
    let w = tensor(&[4, 3, 3, 2], 2);
    let b = tensor(&[6], 3);
    let args =
        ConvTransposeArgs::default().stride([2, 3]).padding([1, 0]).output_padding([1, 2]).dilation([1, 2]).groups(2);
    let y = x.conv_transpose2d(&w, Some(&b), &args).unwrap();
    // (5 - 1) 2 - 2 + 2 + 1 + 1 = 10; (4 - 1) 3 - 0 + 2 + 2 + 1 = 14.
    assert_eq!(y.shape(), &[2, 6, 10, 14]);
    let (xv, wv, bv) = (x.to_vec_f64().unwrap(), w.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
    let mut want = vec![0.0; 2 * 6 * 10 * 14];
    for n in 0..2 {
        for ci in 0..4 {
            let group = ci / 2;
            for co in 0..3 {
                for y0 in 0..5 {
                    for x0 in 0..4 {
                        for i in 0..3 {
                            for j in 0..2 {
                                let oy = (y0 * 2 + i) as i64 - 1;
                                let ox = (x0 * 3 + j * 2) as i64;
                                if (0..10).contains(&oy) && (0..14).contains(&ox) {
                                    let c = group * 3 + co;
                                    want[at(&[2, 6, 10, 14], &[n, c, oy as usize, ox as usize])] += xv
                                        [at(&[2, 4, 5, 4], &[n, ci, y0, x0])]
                                        * wv[at(&[4, 3, 3, 2], &[ci, co, i, j])];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    for (p, v) in want.iter_mut().enumerate() {
        *v += bv[p / 140 % 6];
    }
    let scale = vec![10.0; want.len()];
    assert_close("conv_transpose2d", &y, &Expected { values: want, scale }, &[2, 6, 10, 14]);
    // Unbatched and 1-d forms agree with the batched 2-d one.
    let y0 = x.select(0, 1).unwrap().conv_transpose2d(&w, Some(&b), &args).unwrap();
    assert_eq!(y0.to_vec::<f64>().unwrap(), y.select(0, 1).unwrap().to_vec::<f64>().unwrap());
    let x1 = tensor(&[2, 4, 6], 4);
    let w1 = tensor(&[4, 3, 3], 5);
    let a1 = ConvTransposeArgs::default().stride(2).padding(1).output_padding(1).groups(2);
    let y1 = x1.conv_transpose1d(&w1, None, &a1).unwrap();
    let a2 = ConvTransposeArgs::default().stride([1, 2]).padding([0, 1]).output_padding([0, 1]).groups(2);
    let y2 = x1.unsqueeze(2).unwrap().conv_transpose2d(&w1.unsqueeze(2).unwrap(), None, &a2).unwrap();
    assert_eq!(y1.shape(), &[2, 6, 12]);
    assert_eq!(y1.to_vec::<f64>().unwrap(), y2.squeeze(2).unwrap().to_vec::<f64>().unwrap());
}

#[test]
fn same_and_valid_padding_and_1d_forms() {
    // "same" with an even kernel pads one more zero after the input than before it.
    let x = tensor(&[2, 3, 7, 6], 7);
    let w = tensor(&[5, 3, 4, 2], 8);
    let same = x.conv2d(&w, None, &ConvArgs::default().padding(Padding::Same).dilation([1, 3])).unwrap();
    assert_eq!(same.shape(), &[2, 5, 7, 6]);
    // Total padding 3 (1 before, 2 after) rows and 3 (1, 2) columns, done by hand.
    let padded = x.pad(&[(1, 2), (1, 2)], 0.0).unwrap();
    let by_hand = padded.conv2d(&w, None, &ConvArgs::default().dilation([1, 3])).unwrap();
    let (a, b) = (same.to_vec::<f64>().unwrap(), by_hand.to_vec::<f64>().unwrap());
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 1e-12));
    let valid = x.conv2d(&w, None, &ConvArgs::default().padding(Padding::Valid)).unwrap();
    assert_eq!(valid.shape(), &[2, 5, 4, 5]);
    // conv1d is the 2-d convolution over a height of 1; unbatched inputs drop the batch.
    let x1 = tensor(&[2, 4, 11], 9);
    let w1 = tensor(&[6, 2, 3], 10);
    let b1 = tensor(&[6], 11);
    let a1 = ConvArgs::default().stride(2).padding(2).dilation(2).groups(2);
    let y1 = x1.conv1d(&w1, Some(&b1), &a1).unwrap();
    let a2 = ConvArgs::default().stride([1, 2]).padding([0, 2]).dilation([1, 2]).groups(2);
    let y2 = x1.unsqueeze(2).unwrap().conv2d(&w1.unsqueeze(2).unwrap(), Some(&b1), &a2).unwrap();
    assert_eq!(y1.shape(), &[2, 6, 6]);
    assert_eq!(y1.to_vec::<f64>().unwrap(), y2.squeeze(2).unwrap().to_vec::<f64>().unwrap());
    let single = x1.select(0, 1).unwrap().conv1d(&w1, Some(&b1), &a1).unwrap();
    assert_eq!(single.to_vec::<f64>().unwrap(), y1.select(0, 1).unwrap().to_vec::<f64>().unwrap());
    let same1 = x1.conv1d(&w1, None, &ConvArgs::default().padding(Padding::Same).groups(2)).unwrap();
    assert_eq!(same1.shape(), &[2, 6, 11]);
}

#[test]
fn unfold_and_fold_match_the_definitions() {
    let args = UnfoldArgs::new([2, 3]).dilation([2, 1]).padding([1, 2]).stride([2, 1]);
    for (shape, seed) in [([2usize, 3, 6, 5], 20u64), ([1, 40, 30, 29], 21)] {
        let x = tensor(&shape, seed);
        let [n, c, h, w] = shape;
        let oh = (h + 2 - 2 - 1) / 2 + 1;
        let ow = (w + 4 - 2 - 1) + 1;
        for (layout, xl) in [("contiguous", x.clone()), ("strided", strided(&x))] {
            let cols = xl.im2col(&args).unwrap();
            assert_eq!(cols.shape(), &[n, c * 6, oh * ow], "{layout}");
            let (xv, cv) = (x.to_vec::<f64>().unwrap(), cols.to_vec::<f64>().unwrap());
            for b in 0..n {
                for ch in 0..c {
                    for i in 0..2 {
                        for j in 0..3 {
                            for y in 0..oh {
                                for xx in 0..ow {
                                    let iy = (y * 2 + i * 2) as i64 - 1;
                                    let ix = (xx + j) as i64 - 2;
                                    let inside = (0..h as i64).contains(&iy) && (0..w as i64).contains(&ix);
                                    let want =
                                        if inside { xv[at(&shape, &[b, ch, iy as usize, ix as usize])] } else { 0.0 };
                                    let got = cv[at(&[n, c * 6, oh * ow], &[b, ch * 6 + i * 3 + j, y * ow + xx])];
                                    assert_eq!(got, want, "{layout} unfold at {b} {ch} {i} {j} {y} {xx}");
                                }
                            }
                        }
                    }
                }
            }
            // fold is the adjoint: <unfold(x), z> == <x, fold(z)>.
            let z = tensor(&[n, c * 6, oh * ow], seed + 1);
            let folded = strided(&z).col2im([h, w], &args).unwrap();
            assert_eq!(folded.shape(), &shape);
            let lhs: f64 = cv.iter().zip(z.to_vec::<f64>().unwrap()).map(|(a, b)| a * b).sum();
            let rhs: f64 = xv.iter().zip(folded.to_vec::<f64>().unwrap()).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-9 * lhs.abs().max(1.0), "{layout}: {lhs} vs {rhs}");
        }
        let f32_cols = x.to_dtype(DType::F32).im2col(&args).unwrap();
        assert_eq!(f32_cols.to_vec_f64().unwrap(), x.im2col(&args).unwrap().to_dtype(DType::F32).to_vec_f64().unwrap());
    }
    // Unbatched forms.
    let x = tensor(&[3, 4, 4], 30);
    let cols = x.im2col(&UnfoldArgs::new(2)).unwrap();
    assert_eq!(cols.shape(), &[12, 9]);
    assert_eq!(cols.col2im([4, 4], &UnfoldArgs::new(2)).unwrap().shape(), &[3, 4, 4]);
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    // The work is split into fixed pieces: the same inputs give bitwise the same results on
    // a rayon pool of 1 and of 3 threads.
    let c = case(3, 16, [30, 31], 12, [3, 3], 1, 1, 1, 1);
    let g = geometry(&c);
    let x = tensor(&g.input_shape(3), 40).to_dtype(DType::F32);
    let w = tensor(&g.weight_shape(), 41).to_dtype(DType::F32);
    let gy = tensor(&g.output_shape(3), 42).to_dtype(DType::F32);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            [
                x.conv2d_resolved(&w, None, &g).unwrap().to_vec::<f32>().unwrap(),
                gy.conv_transpose2d_resolved(&w, None, &g).unwrap().to_vec::<f32>().unwrap(),
                x.conv2d_weight_grad(&gy, &g).unwrap().to_vec::<f32>().unwrap(),
            ]
        })
    };
    assert_eq!(run(1), run(3));
}
