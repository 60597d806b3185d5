//! The kinds of step of a program: one function per `Backend` method or family of them.

use super::*;

fn dt(p: &mut Program<'_>, from: &[DType]) -> DType {
    p.pick(from)
}

fn rank_shape(p: &mut Program<'_>) -> Vec<usize> {
    let rank = p.rng.random_range(0..=3);
    let mut s = p.shape(rank, 4);
    // Now and then an empty dimension.
    if rank > 0 && p.rng.random_bool(0.05) {
        s[0] = 0;
    }
    s
}

pub(super) fn full(p: &mut Program<'_>) {
    let dtype = dt(p, &ALL);
    let n = p.rng.random_range(0..6);
    let v = p.pick(&[Scalar::Float(2.5), Scalar::Int(-1), Scalar::Int(7), Scalar::Float(-0.1)]);
    let r = p.b.full(n, v, dtype).map(|s| vec![s]);
    p.record("full", None, format!("{n} x {v:?} {dtype}"), EXACT, r);
}

pub(super) fn cast(p: &mut Program<'_>) {
    let (from, to) = (dt(p, &ALL), dt(p, &ALL));
    let shape = rank_shape(p);
    let x = p.operand_with(from, &shape, &mut |p, n| {
        // Values beyond the integer ranges too, to check saturation.
        (0..n).map(|_| if from.is_float() { p.rng.random_range(-400.0..400.0) } else { p.data(from, 1)[0] }).collect()
    });
    let r = p.b.cast(x.view(), to).map(|s| vec![s]);
    p.record("cast", None, format!("{from} -> {to} {shape:?}"), EXACT, r);
    let r = p.b.download(x.view()).map(|h| vec![Value { dtype: h.dtype(), data: values(&h) }]);
    p.record_values("download", format!("{from} {shape:?}"), EXACT, r);
    p.record_values("upload", String::new(), EXACT, Ok(vec![]));
}

fn unary_dtype(p: &mut Program<'_>, op: UnaryOp) -> DType {
    use UnaryOp::*;
    let int_ok = matches!(
        op,
        Neg | Abs
            | Sign
            | Square
            | Relu
            | Floor
            | Ceil
            | Round
            | Clamp { .. }
            | AddScalar(_)
            | SubScalar(_)
            | RSubScalar(_)
            | MulScalar(_)
            | MaximumScalar(_)
            | MinimumScalar(_)
    ) || matches!(op, PowScalar(Scalar::Int(_)));
    if int_ok { dt(p, &ALL) } else { dt(p, &FLOATS) }
}

pub(super) fn unary(p: &mut Program<'_>) {
    for op in unary_ops() {
        let dtype = unary_dtype(p, op);
        let shape = rank_shape(p);
        let x = p.operand(dtype, &shape);
        let r = p.b.unary(op, x.view()).map(|s| vec![s]);
        p.record("unary", Some(op.name()), format!("{op:?} {dtype} {shape:?}"), function(dtype), r);
    }
}

pub(super) fn binary(p: &mut Program<'_>) {
    for op in BINARY {
        let dtype = dt(p, &ALL);
        let shape = rank_shape(p);
        let a = p.operand(dtype, &shape);
        let b = if op == BinaryOp::Pow && !dtype.is_float() {
            // Small exponents, some negative.
            p.operand_with(dtype, &shape, &mut |p, n| (0..n).map(|_| p.rng.random_range(-2..=5) as f64).collect())
        } else {
            p.operand(dtype, &shape)
        };
        let r = p.b.binary(op, a.view(), b.view()).map(|s| vec![s]);
        p.record("binary", Some(op.name()), format!("{op:?} {dtype} {shape:?}"), ulps(dtype, 4.0), r);
    }
}

pub(super) fn compare(p: &mut Program<'_>) {
    for op in COMPARE {
        let dtype = dt(p, &ALL);
        let shape = rank_shape(p);
        let (a, b) = (p.operand(dtype, &shape), p.operand(dtype, &shape));
        let r = p.b.compare(op, a.view(), b.view()).map(|s| vec![s]);
        p.record("compare", Some(op.name()), format!("{op:?} {dtype} {shape:?}"), EXACT, r);
    }
}

pub(super) fn compare_scalar(p: &mut Program<'_>) {
    for op in COMPARE {
        let dtype = dt(p, &ALL);
        let shape = rank_shape(p);
        let a = p.operand(dtype, &shape);
        let s = p.pick(&[
            Scalar::Float(1.5),
            Scalar::Int(2),
            Scalar::Float(-0.0),
            Scalar::Int(300),
            Scalar::Float(f64::NAN),
        ]);
        let r = p.b.compare_scalar(op, a.view(), s).map(|s| vec![s]);
        p.record("compare_scalar", Some(op.name()), format!("{op:?} {dtype} {shape:?} {s:?}"), EXACT, r);
    }
}

pub(super) fn where_cond(p: &mut Program<'_>) {
    let dtype = dt(p, &ALL);
    let shape = rank_shape(p);
    let c = p.operand_with(DType::U8, &shape, &mut |p, n| (0..n).map(|_| p.rng.random_range(0..3) as f64).collect());
    let (a, b) = (p.operand(dtype, &shape), p.operand(dtype, &shape));
    let r = p.b.where_cond(c.view(), a.view(), b.view()).map(|s| vec![s]);
    p.record("where_cond", None, format!("{dtype} {shape:?}"), EXACT, r);
}

/// The whole storage after an in-place write.
fn whole(p: &Program<'_>, s: &Storage) -> Result<Vec<Value>, String> {
    p.download(s).map(|v| vec![v])
}

pub(super) fn unary_inplace(p: &mut Program<'_>) {
    let op = p.pick(&[UnaryOp::Exp, UnaryOp::Neg, UnaryOp::AddScalar(Scalar::Int(2)), UnaryOp::Relu, UnaryOp::Abs]);
    let dtype = if matches!(op, UnaryOp::Exp) { dt(p, &FLOATS) } else { dt(p, &ALL) };
    let shape = p.shape(2, 4);
    let mut x = p.destination(dtype, &shape);
    let r = p.b.unary_inplace(op, &mut x.s, &x.l);
    let result = r.map_err(|e| e.to_string()).and_then(|_| whole(p, &x.s));
    p.steps.push(Step {
        method: "unary_inplace",
        variant: Some(op.name()),
        what: format!("{op:?} {dtype}"),
        result,
        tol: ulps(dtype, 4.0),
    });
}

pub(super) fn binary_inplace(p: &mut Program<'_>) {
    let op = p.pick(&BINARY[..4]);
    let dtype = dt(p, &FLOATS);
    let shape = p.shape(2, 4);
    let mut x = p.destination(dtype, &shape);
    let y = p.operand(dtype, &shape);
    let r = p.b.binary_inplace(op, &mut x.s, &x.l, y.view());
    let result = r.map_err(|e| e.to_string()).and_then(|_| whole(p, &x.s));
    p.steps.push(Step {
        method: "binary_inplace",
        variant: Some(op.name()),
        what: format!("{op:?} {dtype}"),
        result,
        tol: ulps(dtype, 4.0),
    });
}

pub(super) fn copy_inplace(p: &mut Program<'_>) {
    let (from, to) = (dt(p, &ALL), dt(p, &ALL));
    let shape = p.shape(2, 4);
    let mut x = p.destination(to, &shape);
    let y = p.operand(from, &shape);
    let r = p.b.copy_inplace(&mut x.s, &x.l, y.view());
    let result = r.map_err(|e| e.to_string()).and_then(|_| whole(p, &x.s));
    p.steps.push(Step { method: "copy_inplace", variant: None, what: format!("{from} -> {to}"), result, tol: EXACT });
}

pub(super) fn fill_inplace(p: &mut Program<'_>) {
    let dtype = dt(p, &ALL);
    let shape = p.shape(2, 4);
    let mut x = p.destination(dtype, &shape);
    let v = p.pick(&[Scalar::Float(0.3), Scalar::Int(5)]);
    let r = p.b.fill_inplace(&mut x.s, &x.l, v);
    let result = r.map_err(|e| e.to_string()).and_then(|_| whole(p, &x.s));
    p.steps.push(Step { method: "fill_inplace", variant: None, what: format!("{v:?} {dtype}"), result, tol: EXACT });
}

pub(super) fn reduce(p: &mut Program<'_>) {
    for op in REDUCE {
        let dtype = dt(p, &ALL);
        let rank = p.rng.random_range(1..=3);
        let shape = p.shape(rank, 5);
        let x = p.operand(dtype, &shape);
        let dims: Vec<usize> = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            vec![p.rng.random_range(0..rank)]
        } else {
            (0..rank).filter(|_| p.rng.random_bool(0.6)).collect()
        };
        let k: usize = dims.iter().map(|&d| shape[d]).product();
        // Products of many terms grow: compare them relatively only.
        let tol = if op == ReduceOp::Sum {
            sums(dtype, k)
        } else if op == ReduceOp::Prod {
            ulps(dtype, 4.0 * k as f64)
        } else {
            EXACT
        };
        let r = p.b.reduce(op, x.view(), &dims).map(|s| vec![s]);
        p.record("reduce", Some(op.name()), format!("{op:?} {dtype} {shape:?} over {dims:?}"), tol, r);
    }
}

pub(super) fn softmax(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let rank = p.rng.random_range(1..=3);
    let shape = p.shape(rank, 5);
    let x = p.operand(dtype, &shape);
    let dim = p.rng.random_range(0..rank);
    let log = p.rng.random_bool(0.5);
    let r = p.b.softmax(x.view(), dim, log).map(|s| vec![s]);
    p.record("softmax", None, format!("{dtype} {shape:?} dim {dim} log {log}"), sums(dtype, 8), r);
}

pub(super) fn class_loss(p: &mut Program<'_>) {
    let dtype = dt(p, &[DType::F32, DType::F64]);
    let (n, c) = (p.rng.random_range(1..5), p.rng.random_range(2..5));
    let logits = p.rng.random_bool(0.5);
    let x = if logits {
        p.operand(dtype, &[n, c])
    } else {
        // Log-probabilities of a softmax.
        let raw = p.operand(dtype, &[n, c]);
        let s = p.b.softmax(raw.view(), 1, true).expect("log_softmax");
        Operand { s, l: Layout::contiguous(Shape::from([n, c])) }
    };
    let ignore = p.rng.random_bool(0.3).then_some(1);
    let t = p.indices(&[n], c);
    let reduction = p.pick(&[LossReduction::None, LossReduction::Sum, LossReduction::Mean]);
    let label_smoothing = p.pick(&[0.0, 0.1]);
    let spec = ClassLoss {
        scores: if logits { ClassScores::Logits } else { ClassScores::LogProbs },
        label_smoothing,
        ignore_index: ignore,
        reduction,
    };
    let r = p.b.class_loss(x.view(), t.view(), &spec).map(|s| vec![s]);
    let what = format!("{spec:?} {dtype} [{n}, {c}]");
    p.record("class_loss", None, what.clone(), sums(dtype, n * c), r);
    let gshape: Vec<usize> = if reduction == LossReduction::None { vec![n] } else { vec![] };
    let g = p.operand(dtype, &gshape);
    let r = p.b.class_loss_backward(x.view(), t.view(), g.view(), &spec).map(|s| vec![s]);
    p.record("class_loss_backward", None, what, sums(dtype, n * c), r);
}

pub(super) fn attention(p: &mut Program<'_>) {
    let dtype = dt(p, &[DType::F32, DType::F64, DType::BF16]);
    let (b, l, s, e, ev) = (
        p.rng.random_range(1..3),
        p.rng.random_range(1..5),
        p.rng.random_range(1..5),
        p.rng.random_range(1..5),
        p.rng.random_range(1..5),
    );
    let (q, k, v) = (p.operand(dtype, &[b, l, e]), p.operand(dtype, &[b, s, e]), p.operand(dtype, &[b, s, ev]));
    let causal = p.rng.random_bool(0.3);
    let mask = match p.rng.random_range(0..3) {
        0 => None,
        // Boolean masks that keep every row some key (ember and PyTorch differ on fully
        // masked rows only in which zero they return).
        1 => Some(p.operand_with(DType::U8, &[b, l, s], &mut |p, n| {
            (0..n).map(|i| if i % s.max(1) == 0 { 1.0 } else { p.rng.random_range(0..2) as f64 }).collect()
        })),
        _ => Some(p.operand(dtype, &[b, l, s])),
    };
    let spec = Attention { scale: Attention::default_scale(e), causal };
    let m = mask.as_ref().map(Operand::view);
    let tol = sums(dtype, s * e);
    let what = format!("{dtype} b{b} l{l} s{s} e{e} ev{ev} causal {causal} mask {}", mask.is_some());
    let g = p.operand(dtype, &[b, l, ev]);
    match p.b.attention([q.view(), k.view(), v.view()], m, &spec) {
        Ok([o, lse]) => {
            let lo = Layout::contiguous(Shape::from([b, l, ev]));
            let ll = Layout::contiguous(Shape::from([b, l]));
            let back =
                p.b.attention_backward([q.view(), k.view(), v.view()], m, [(&o, &lo), (&lse, &ll), g.view()], &spec);
            p.record("attention", None, what.clone(), tol, Ok(vec![o, lse]));
            p.record("attention_backward", None, what, tol, back.map(Vec::from));
        }
        Err(err) => {
            let msg = err.to_string();
            p.record("attention", None, what.clone(), tol, Err(err));
            p.record_values("attention_backward", what, tol, Err(ember_tensor::Error::invalid("forward", msg)));
        }
    }
}

/// Attention with its output and gradients stored through the layouts multi-head attention
/// asks for: the heads of `[b, l, h, e]` data viewed as `[b, h, l, e]`.
pub(super) fn attention_laid_out(p: &mut Program<'_>) {
    let dtype = dt(p, &[DType::F32, DType::F64, DType::BF16]);
    let (b, h, l, s, e) = (
        p.rng.random_range(1..3),
        p.rng.random_range(1..4),
        p.rng.random_range(1..5),
        p.rng.random_range(1..5),
        p.rng.random_range(1..5),
    );
    let heads = |shape: [usize; 4]| {
        let [b, h, t, e] = shape;
        let lay = Layout::new(Shape::from([b, h, t, e].as_slice()), [t * h * e, e, h * e, 1].into(), 0);
        lay.expect("a dense layout")
    };
    let raw = |p: &mut Program<'_>, shape: [usize; 4]| {
        let vals = p.data(dtype, shape.iter().product());
        p.exact(dtype, &shape, &vals)
    };
    let q = raw(p, [b, l, h, e]);
    let (k, v) = (p.operand(dtype, &[b, h, s, e]), p.operand(dtype, &[b, h, s, e]));
    let lq = heads([b, h, l, e]);
    let spec = Attention { scale: Attention::default_scale(e), causal: p.rng.random_bool(0.5) };
    let tol = sums(dtype, s * e);
    let what = format!("{dtype} b{b} h{h} l{l} s{s} e{e} causal {}", spec.causal);
    let g = raw(p, [b, l, h, e]);
    let contiguous = |shape: [usize; 4]| Layout::contiguous(Shape::from(shape.as_slice()));
    let (lk, lv) = (contiguous([b, h, s, e]), contiguous([b, h, s, e]));
    let qkv = [(&q.s, &lq), k.view(), v.view()];
    match p.b.attention_laid_out(qkv, None, &spec, &lq) {
        Ok([o, lse]) => {
            let ll = Layout::contiguous(Shape::from([b, h, l].as_slice()));
            let saved = [(&o, &lq), (&lse, &ll), (&g.s, &lq)];
            let back = p.b.attention_backward_laid_out(qkv, None, saved, &spec, [&lq, &lk, &lv]);
            p.record("attention_laid_out", None, what.clone(), tol, Ok(vec![o, lse]));
            p.record("attention_backward_laid_out", None, what, tol, back.map(Vec::from));
        }
        Err(err) => {
            let msg = err.to_string();
            p.record("attention_laid_out", None, what.clone(), tol, Err(err));
            let failed = Err(ember_tensor::Error::invalid("forward", msg));
            p.record_values("attention_backward_laid_out", what, tol, failed);
        }
    }
}

pub(super) fn lstm(p: &mut Program<'_>) {
    let dtype = dt(p, &[DType::F32, DType::F64]);
    let (b, h, t) = (p.rng.random_range(1..3), p.rng.random_range(1..4), p.rng.random_range(1..4));
    let tol = sums(dtype, 4 * h);
    let (a, gi, c) = (p.operand(dtype, &[b, 4 * h]), p.operand(dtype, &[b, 4 * h]), p.operand(dtype, &[b, h]));
    let (gy, dh, dc) = (p.operand(dtype, &[7, b, h]), p.operand(dtype, &[b, h]), p.operand(dtype, &[b, h]));
    let y = p.b.lstm_cell(a.view(), gi.view(), c.view(), (b, h));
    let what = format!("{dtype} b{b} h{h}");
    match y {
        Ok(y) => {
            let ly = Layout::contiguous(Shape::from([7, b, h]));
            let back = p.b.lstm_cell_backward((&y, &ly), Some(gy.view()), dh.view(), dc.view(), c.view(), (b, h));
            p.record("lstm_cell", None, what.clone(), tol, Ok(vec![y]));
            p.record("lstm_cell_backward", None, what, tol, back.map(Vec::from));
        }
        Err(e) => {
            p.record("lstm_cell", None, what.clone(), tol, Err(e));
            p.record_values("lstm_cell_backward", what, tol, Err(ember_tensor::Error::invalid("forward", "failed")));
        }
    }
    let run = LstmRun { steps: t, batch: b, hidden: h, reverse: p.rng.random_bool(0.5) };
    let (gi, w, h0, c0) = (
        p.operand(dtype, &[t, b, 4 * h]),
        p.operand(dtype, &[4 * h, h]),
        p.operand(dtype, &[b, h]),
        p.operand(dtype, &[b, h]),
    );
    let what = format!("{run:?} {dtype}");
    // The gradient of the state slots (`c`, `h`) alone: the output of the recorded node.
    let gy = p.operand(dtype, &[t, 2, b, h]);
    match p.b.lstm_sequence(gi.view(), w.view(), h0.view(), c0.view(), &run) {
        Ok(y) => {
            let ly = Layout::contiguous(Shape::from([t, 7, b, h]));
            let back = p.b.lstm_sequence_backward((&y, &ly), gy.view(), w.view(), c0.view(), &run);
            p.record("lstm_sequence", None, what.clone(), sums(dtype, 8 * t * h), Ok(vec![y]));
            p.record("lstm_sequence_backward", None, what, sums(dtype, 8 * t * h), back.map(Vec::from));
        }
        Err(e) => {
            p.record("lstm_sequence", None, what.clone(), tol, Err(e));
            p.record_values(
                "lstm_sequence_backward",
                what,
                tol,
                Err(ember_tensor::Error::invalid("forward", "failed")),
            );
        }
    }
}

pub(super) fn matmul(p: &mut Program<'_>) {
    let dtype = dt(p, &ALL);
    let batch_rank = p.rng.random_range(0..=2);
    let batch = p.shape(batch_rank, 3);
    let (m, k, n) = (p.rng.random_range(1..6), p.rng.random_range(0..6), p.rng.random_range(1..6));
    let sa: Vec<usize> = batch.iter().copied().chain([m, k]).collect();
    let sb: Vec<usize> = batch.iter().copied().chain([k, n]).collect();
    let (a, b) = (p.operand(dtype, &sa), p.operand(dtype, &sb));
    let r = p.b.matmul(a.view(), b.view()).map(|s| vec![s]);
    p.record("matmul", None, format!("{dtype} {sa:?} @ {sb:?}"), sums(dtype, k), r);
}

pub(super) fn matmul_into(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let (m, k, n) = (p.rng.random_range(1..6), p.rng.random_range(0..6), p.rng.random_range(1..6));
    let (a, b) = (p.operand(dtype, &[m, k]), p.operand(dtype, &[k, n]));
    // The destination may be strided or offset: the product must land in its elements only.
    let mut x = p.destination(dtype, &[m, n]);
    let r = p.b.matmul_into(a.view(), b.view(), (&mut x.s, &x.l));
    let result = r.map_err(|e| e.to_string()).and_then(|_| whole(p, &x.s));
    p.steps.push(Step {
        method: "matmul_into",
        variant: None,
        what: format!("{dtype} [{m}, {k}] @ [{k}, {n}]"),
        result,
        tol: sums(dtype, k),
    });
}

pub(super) fn index(p: &mut Program<'_>) {
    let dtype = dt(p, &ALL);
    let shape = p.shape(2, 4);
    let x = p.operand(dtype, &shape);
    let dim = p.rng.random_range(0..2);
    let n = p.rng.random_range(0..5);
    let i = p.indices(&[n], shape[dim]);
    let r = p.b.index_select(x.view(), dim, i.view()).map(|s| vec![s]);
    p.record("index_select", None, format!("{dtype} {shape:?} dim {dim}"), EXACT, r);
    let mut ishape = shape.clone();
    ishape[dim] = p.rng.random_range(1..5);
    let i = p.indices(&ishape, shape[dim]);
    let r = p.b.gather(x.view(), dim, i.view()).map(|s| vec![s]);
    p.record("gather", None, format!("{dtype} {shape:?} dim {dim} index {ishape:?}"), EXACT, r);
    let fdtype = dt(p, &[DType::F32, DType::F64, DType::I64]);
    let d = p.operand(fdtype, &shape);
    let src = p.operand(fdtype, &ishape);
    let r = p.b.scatter_add(d.view(), dim, i.view(), src.view()).map(|s| vec![s]);
    p.record("scatter_add", None, format!("{fdtype} {shape:?} dim {dim}"), sums(fdtype, 8), r);
    // An index out of range is an error on both.
    let bad = p.exact(DType::I64, &[1], &[shape[dim] as f64]);
    let r = p.b.index_select(x.view(), dim, bad.view()).map(|s| vec![s]);
    p.record("index_select", None, "out of range".into(), EXACT, r);
}

pub(super) fn masked_fill(p: &mut Program<'_>) {
    let dtype = dt(p, &ALL);
    let shape = rank_shape(p);
    let x = p.operand(dtype, &shape);
    let m = p.operand_with(DType::U8, &shape, &mut |p, n| (0..n).map(|_| p.rng.random_range(0..2) as f64).collect());
    let r = p.b.masked_fill(x.view(), m.view(), Scalar::Float(-7.0)).map(|s| vec![s]);
    p.record("masked_fill", None, format!("{dtype} {shape:?}"), EXACT, r);
}

pub(super) fn relu_backward(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let shape = rank_shape(p);
    let (g, y) = (p.operand(dtype, &shape), p.operand(dtype, &shape));
    let r = p.b.relu_backward(g.view(), y.view()).map(|s| vec![s]);
    p.record("relu_backward", None, format!("{dtype} {shape:?}"), EXACT, r);
}

pub(super) fn triangle(p: &mut Program<'_>) {
    let dtype = dt(p, &ALL);
    let rank = p.rng.random_range(1..=3);
    let shape = p.shape(rank, 5);
    let x = p.operand(dtype, &shape);
    let (d, upper) = (p.rng.random_range(-2..3), p.rng.random_bool(0.5));
    let r = p.b.triangle(x.view(), d, upper).map(|s| vec![s]);
    p.record("triangle", None, format!("{dtype} {shape:?} {d} {upper}"), EXACT, r);
}

fn geometry(p: &mut Program<'_>) -> (usize, ConvGeometry) {
    loop {
        let n = p.rng.random_range(1..3);
        let groups = p.pick(&[1, 1, 2]);
        let cin = groups * p.rng.random_range(1..3);
        let cout = groups * p.rng.random_range(1..3);
        let (kh, kw) = (p.rng.random_range(1..4), p.rng.random_range(1..4));
        let (h, w) = (p.rng.random_range(2..8), p.rng.random_range(2..8));
        let stride = p.rng.random_range(1..3);
        let dilation = p.rng.random_range(1..3);
        let mut args = ConvArgs::<2>::default().stride(stride).dilation(dilation).groups(groups);
        args = match p.rng.random_range(0..3) {
            0 => args,
            1 => args.padding(Padding::Explicit([1, 0])),
            _ if stride == 1 => args.padding(Padding::Same),
            _ => args,
        };
        if let Ok(g) = conv_geometry("conv2d", &[n, cin, h, w], &[cout, cin / groups, kh, kw], None, &args) {
            return (n, g);
        }
    }
}

pub(super) fn conv(p: &mut Program<'_>) {
    let dtype = dt(p, &[DType::F32, DType::F64, DType::BF16]);
    let (n, g) = geometry(p);
    let [h, w] = g.window.input;
    let [oh, ow] = g.window.output;
    let x = p.operand(dtype, &[n, g.in_channels, h, w]);
    let wt = p.operand(dtype, g.weight_shape().dims());
    let bias = p.rng.random_bool(0.5).then(|| p.operand(dtype, &[g.out_channels]));
    let taps = g.in_channels / g.groups * g.window.kernel[0] * g.window.kernel[1];
    let tol = sums(dtype, taps);
    let what = format!("{dtype} n{n} {g:?}");
    let r = p.b.conv2d(x.view(), wt.view(), bias.as_ref().map(Operand::view), &g).map(|s| vec![s]);
    p.record("conv2d", None, what.clone(), tol, r);
    let y = p.operand(dtype, &[n, g.out_channels, oh, ow]);
    let tb = p.rng.random_bool(0.5).then(|| p.operand(dtype, &[g.in_channels]));
    let r = p.b.conv_transpose2d(y.view(), wt.view(), tb.as_ref().map(Operand::view), &g).map(|s| vec![s]);
    p.record("conv_transpose2d", None, what.clone(), sums(dtype, taps * 2), r);
    let r = p.b.conv2d_weight_grad(x.view(), y.view(), &g).map(|s| vec![s]);
    p.record("conv2d_weight_grad", None, what, sums(dtype, n * oh * ow), r);
}

pub(super) fn window(p: &mut Program<'_>) {
    // The CPU backend's unfold and fold take f32 and f64 (the tensor layer widens 16-bit
    // inputs first).
    let dtype = dt(p, &[DType::F32, DType::F64]);
    let (n, c, h, w) =
        (p.rng.random_range(1..3), p.rng.random_range(1..3), p.rng.random_range(2..7), p.rng.random_range(2..7));
    let k = [p.rng.random_range(1..3), p.rng.random_range(1..3)];
    let args = UnfoldArgs {
        kernel_size: k,
        dilation: [1, p.rng.random_range(1..3)],
        padding: [p.rng.random_range(0..2), 0],
        stride: [p.rng.random_range(1..3), 1],
    };
    let Ok(win) = unfold_window(&[n, c, h, w], &args) else { return };
    let x = p.operand(dtype, &[n, c, h, w]);
    let r = p.b.unfold(x.view(), &win).map(|s| vec![s]);
    p.record("unfold", None, format!("{dtype} {win:?}"), EXACT, r);
    let cols = p.operand(dtype, &[n, c * k[0] * k[1], win.output[0] * win.output[1]]);
    let r = p.b.fold(cols.view(), &win).map(|s| vec![s]);
    p.record("fold", None, format!("{dtype} {win:?}"), sums(dtype, k[0] * k[1]), r);
}

pub(super) fn channel_norm(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let (o, c, i) = (p.rng.random_range(1..4), p.rng.random_range(1..4), p.rng.random_range(1..5));
    let x = p.operand(dtype, &[o, c, i]);
    let w = p.rng.random_bool(0.5).then(|| p.operand(dtype, &[c]));
    let b = p.rng.random_bool(0.5).then(|| p.operand(dtype, &[c]));
    // The output is (x - mean) / sqrt(var + eps): the mean's rounding is magnified by up
    // to 1 / sqrt(eps) where a channel's values (nearly) agree.
    let tol = sums(dtype, 4 * o * i).max(Tol { rel: 0.0, abs: sums(dtype, 4 * o * i).abs * 10.0 });
    let what = format!("{dtype} [{o}, {c}, {i}]");
    let g = p.operand(dtype, &[o, c, i]);
    match p.b.channel_norm(x.view(), w.as_ref().map(Operand::view), b.as_ref().map(Operand::view), 1e-5) {
        Ok([y, mean, var]) => {
            let lc = Layout::contiguous(Shape::from([c]));
            let back = p.b.channel_norm_backward(
                x.view(),
                g.view(),
                (&mean, &lc),
                (&var, &lc),
                w.as_ref().map(Operand::view),
                1e-5,
            );
            p.record("channel_norm", None, what.clone(), tol, Ok(vec![y, mean, var]));
            p.record("channel_norm_backward", None, what, tol, back.map(Vec::from));
        }
        Err(e) => {
            p.record("channel_norm", None, what.clone(), tol, Err(e));
            p.record_values("channel_norm_backward", what, tol, Err(ember_tensor::Error::invalid("forward", "failed")));
        }
    }
}

pub(super) fn layer_norm(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let (rows, n) = (p.rng.random_range(1..5), p.rng.random_range(1..7));
    let x = p.operand(dtype, &[rows, n]);
    let w = p.rng.random_bool(0.5).then(|| p.operand(dtype, &[n]));
    let b = p.rng.random_bool(0.5).then(|| p.operand(dtype, &[n]));
    // As for channel_norm: the mean's rounding is magnified by up to 1 / sqrt(eps) where a
    // row's values (nearly) agree.
    let tol = sums(dtype, 4 * n).max(Tol { rel: 0.0, abs: sums(dtype, 4 * n).abs * 10.0 });
    let what = format!("{dtype} [{rows}, {n}]");
    let g = p.operand(dtype, &[rows, n]);
    match p.b.layer_norm(x.view(), n, w.as_ref().map(Operand::view), b.as_ref().map(Operand::view), 1e-5) {
        Ok([y, mean, rstd]) => {
            let stats = Layout::contiguous(Shape::from([rows]));
            let back = p.b.layer_norm_backward(
                x.view(),
                g.view(),
                n,
                (&mean, &stats),
                (&rstd, &stats),
                w.as_ref().map(Operand::view),
            );
            p.record("layer_norm", None, what.clone(), tol, Ok(vec![y, mean, rstd]));
            p.record("layer_norm_backward", None, what, tol, back.map(Vec::from));
        }
        Err(e) => {
            p.record("layer_norm", None, what.clone(), tol, Err(e));
            p.record_values("layer_norm_backward", what, tol, Err(ember_tensor::Error::invalid("forward", "failed")));
        }
    }
}

pub(super) fn pool(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let (n, c, h, w) =
        (p.rng.random_range(1..3), p.rng.random_range(1..3), p.rng.random_range(2..8), p.rng.random_range(2..8));
    let input = [n, c, h, w];
    let plan = if p.rng.random_bool(0.3) {
        adaptive_max_pool_plan::<2>("adaptive_max_pool2d", &input, [p.rng.random_range(1..4), p.rng.random_range(1..4)])
    } else {
        let k = p.rng.random_range(1..4);
        let args = MaxPoolArgs::new(k)
            .stride(p.rng.random_range(1..3))
            .padding(p.rng.random_range(0..=k / 2))
            .dilation(p.rng.random_range(1..3))
            .ceil_mode(p.rng.random_bool(0.5));
        max_pool_plan::<2>("max_pool2d", &input, &args)
    };
    let Ok(plan) = plan else { return };
    let x = p.operand(dtype, &input);
    let what = format!("{dtype} {input:?} {:?}", plan.map);
    let [oh, ow] = plan.map.output();
    let g = p.operand(dtype, &[n, c, oh, ow]);
    match p.b.max_pool2d(x.view(), &plan.map) {
        Ok((values, index)) => {
            let li = Layout::contiguous(Shape::from([n, c, oh, ow]));
            // The CPU backend's gather takes f32 and f64 (the tensor layer widens 16-bit
            // planes first); the same call on a widened copy otherwise.
            let wide = if dtype.is_half() {
                let s = p.b.cast(x.view(), DType::F32).expect("cast");
                Operand { s, l: Layout::contiguous(Shape::from(input)) }
            } else {
                Operand { s: p.b.cast(x.view(), dtype).expect("cast"), l: Layout::contiguous(Shape::from(input)) }
            };
            let gathered = p.b.gather_planes(wide.view(), (&index, &li));
            let scattered = p.b.scatter_planes(g.view(), (&index, &li), [h, w]);
            p.record("max_pool2d", None, what.clone(), EXACT, Ok(vec![values, index]));
            p.record("gather_planes", None, what.clone(), EXACT, gathered.map(|s| vec![s]));
            p.record("scatter_planes", None, what, sums(dtype, 9), scattered.map(|s| vec![s]));
        }
        Err(e) => {
            p.record("max_pool2d", None, what.clone(), EXACT, Err(e));
            for m in ["gather_planes", "scatter_planes"] {
                p.record_values(m, what.clone(), EXACT, Err(ember_tensor::Error::invalid("forward", "failed")));
            }
        }
    }
}

pub(super) fn resample(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let (n, c, h, w) =
        (p.rng.random_range(1..3), p.rng.random_range(1..3), p.rng.random_range(2..8), p.rng.random_range(2..8));
    let input = [n, c, h, w];
    let plan = match p.rng.random_range(0..3) {
        0 => avg_pool_plan::<2>(
            "avg_pool2d",
            &input,
            &AvgPoolArgs::new(2).padding(p.rng.random_range(0..2)).count_include_pad(p.rng.random_bool(0.5)),
        ),
        1 => adaptive_avg_pool_plan::<2>(
            "adaptive_avg_pool2d",
            &input,
            [p.rng.random_range(1..4), p.rng.random_range(1..4)],
        ),
        _ => interpolate_plan(
            &input,
            &InterpolateArgs::size(vec![p.rng.random_range(1..9), p.rng.random_range(1..9)])
                .mode(p.pick(&[InterpolateMode::Nearest, InterpolateMode::Bilinear])),
            dtype,
        ),
    };
    let Ok(plan) = plan else { return };
    let map = if p.rng.random_bool(0.3) { plan.map.transpose() } else { plan.map };
    let [ih, iw] = map.input();
    let x = p.operand(dtype, &[n, c, ih, iw]);
    let r = p.b.resample2d(x.view(), &map).map(|s| vec![s]);
    p.record("resample2d", None, format!("{dtype} {:?} -> {:?}", map.input(), map.output()), sums(dtype, 16), r);
}

pub(super) fn random(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let n = p.rng.random_range(0..20);
    let dist = p.pick(&[Distribution::Uniform { low: -1.0, high: 2.0 }, Distribution::Normal { mean: 0.5, std: 2.0 }]);
    let seed = p.rng.random_range(0..1000u64);
    // The global generator is shared by the tests of this binary: one lock around it.
    let _lock = super::GENERATOR.lock();
    ember_tensor::manual_seed(seed);
    let r = p.b.random(n, dist, dtype).map(|s| vec![s]);
    ember_tensor::manual_seed(seed);
    let perm = p.b.randperm(n).map(|s| vec![s]);
    drop(_lock);
    p.record("random", None, format!("{n} {dist:?} {dtype}"), EXACT, r);
    p.record("randperm", None, format!("{n}"), EXACT, perm);
}

pub(super) fn cat(p: &mut Program<'_>) {
    let dtype = dt(p, &ALL);
    let rank = p.rng.random_range(1..=3);
    let shape = p.shape(rank, 4);
    let dim = p.rng.random_range(0..rank);
    let parts: Vec<Operand> = (0..p.rng.random_range(1..4))
        .map(|_| {
            let mut s = shape.clone();
            s[dim] = p.rng.random_range(0..3);
            p.operand(dtype, &s)
        })
        .collect();
    let views: Vec<_> = parts.iter().map(Operand::view).collect();
    let r = p.b.cat(&views, dim).map(|s| vec![s]);
    p.record("cat", None, format!("{dtype} {} parts dim {dim}", parts.len()), EXACT, r);
}

pub(super) fn power_sum(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let shape = rank_shape(p);
    let x = p.operand(dtype, &shape);
    let e = p.pick(&[1.0, 2.0, 3.0, f64::INFINITY]);
    let r = p.b.power_sum(x.view(), e).map(|v| vec![Value { dtype: DType::F64, data: vec![v] }]);
    let k = shape.iter().product::<usize>();
    p.record_values(
        "power_sum",
        format!("{dtype} {shape:?} p {e}"),
        sums(DType::F64, k).max(Tol { rel: 1e-12, abs: 1e-12 }),
        r,
    );
}

impl Tol {
    fn max(self, o: Tol) -> Tol {
        Tol { rel: self.rel.max(o.rel), abs: self.abs.max(o.abs) }
    }
}

/// A parameter-shaped contiguous operand.
fn state(p: &mut Program<'_>, dtype: DType, n: usize, positive: bool) -> Operand {
    let v: Vec<f64> =
        (0..n).map(|_| if positive { p.rng.random_range(0.0..1.0) } else { p.rng.random_range(-1.0..1.0) }).collect();
    p.exact(dtype, &[n], &v)
}

fn all_of(p: &Program<'_>, xs: &[&Operand]) -> Result<Vec<Value>, String> {
    xs.iter().map(|x| p.download(&x.s)).collect()
}

pub(super) fn sgd(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let n = p.rng.random_range(1..9);
    let (mut w, g) = (state(p, dtype, n, false), state(p, dtype, n, false));
    let momentum = p.pick(&[0.0, 0.9]);
    let hp = SgdStep {
        lr: 0.1,
        momentum,
        dampening: p.pick(&[0.0, 0.1]),
        nesterov: momentum > 0.0 && p.rng.random_bool(0.5),
        weight_decay: p.pick(&[0.0, 0.01]),
        fresh_buffer: p.rng.random_bool(0.5),
    };
    let mut b = (momentum > 0.0).then(|| state(p, dtype, n, false));
    let r = p.b.sgd_step((&mut w.s, &w.l), g.view(), b.as_mut().map(|b| (&mut b.s, &b.l)), &hp);
    let mut outs = vec![&w];
    outs.extend(b.as_ref());
    let result = r.map_err(|e| e.to_string()).and_then(|_| all_of(p, &outs));
    p.steps.push(Step {
        method: "sgd_step",
        variant: None,
        what: format!("{hp:?} {dtype}"),
        result,
        tol: ulps(dtype, 8.0),
    });
}

pub(super) fn adam(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let n = p.rng.random_range(1..9);
    let (mut w, g) = (state(p, dtype, n, false), state(p, dtype, n, false));
    let (mut m, mut v) = (state(p, dtype, n, false), state(p, dtype, n, true));
    let amsgrad = p.rng.random_bool(0.3);
    let mut vmax = amsgrad.then(|| state(p, dtype, n, true));
    let hp = AdamStep {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: p.pick(&[0.0, 0.01]),
        decoupled: p.rng.random_bool(0.5),
        amsgrad,
        step: p.rng.random_range(1..20),
    };
    let st = AdamState {
        exp_avg: (&mut m.s, &m.l),
        exp_avg_sq: (&mut v.s, &v.l),
        max_exp_avg_sq: vmax.as_mut().map(|x| (&mut x.s, &x.l)),
    };
    let r = p.b.adam_step((&mut w.s, &w.l), g.view(), st, &hp);
    let mut outs = vec![&w, &m, &v];
    outs.extend(vmax.as_ref());
    let result = r.map_err(|e| e.to_string()).and_then(|_| all_of(p, &outs));
    p.steps.push(Step {
        method: "adam_step",
        variant: None,
        what: format!("{hp:?} {dtype}"),
        result,
        tol: ulps(dtype, 8.0),
    });
}

pub(super) fn rmsprop(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let n = p.rng.random_range(1..9);
    let (mut w, g) = (state(p, dtype, n, false), state(p, dtype, n, false));
    let mut sq = state(p, dtype, n, true);
    let centered = p.rng.random_bool(0.5);
    let momentum = p.pick(&[0.0, 0.9]);
    // A centred average small enough that the variance stays positive.
    let mut ga = centered.then(|| {
        let v: Vec<f64> = (0..n).map(|_| p.rng.random_range(-0.1..0.1)).collect();
        p.exact(dtype, &[n], &v)
    });
    let mut mb = (momentum > 0.0).then(|| state(p, dtype, n, false));
    let hp = RmsPropStep { lr: 1e-2, alpha: 0.99, eps: 1e-8, weight_decay: p.pick(&[0.0, 0.01]), momentum, centered };
    let st = RmsPropState {
        square_avg: (&mut sq.s, &sq.l),
        grad_avg: ga.as_mut().map(|x| (&mut x.s, &x.l)),
        momentum_buffer: mb.as_mut().map(|x| (&mut x.s, &x.l)),
    };
    let r = p.b.rmsprop_step((&mut w.s, &w.l), g.view(), st, &hp);
    let mut outs = vec![&w, &sq];
    outs.extend(ga.as_ref());
    outs.extend(mb.as_ref());
    let result = r.map_err(|e| e.to_string()).and_then(|_| all_of(p, &outs));
    p.steps.push(Step {
        method: "rmsprop_step",
        variant: None,
        what: format!("{hp:?} {dtype}"),
        result,
        tol: ulps(dtype, 8.0),
    });
}

pub(super) fn unscale(p: &mut Program<'_>) {
    let dtype = dt(p, &FLOATS);
    let shape = p.shape(2, 4);
    let special = p.rng.random_bool(0.3);
    let mut x = p.destination(dtype, &shape);
    if special {
        let mut v = vec![0.5; shape.iter().product()];
        v[0] = f64::INFINITY;
        x = p.exact(dtype, &shape, &v);
    }
    let inv = p.pick(&[1.0f32, 0.5, 1.0 / 3.0]);
    let r = p.b.non_finite_check_and_unscale((&mut x.s, &x.l), inv);
    let result = r.map_err(|e| e.to_string()).and_then(|found| {
        let mut v = whole(p, &x.s)?;
        v.push(Value { dtype: DType::U8, data: vec![f64::from(u8::from(found))] });
        Ok(v)
    });
    p.steps.push(Step {
        method: "non_finite_check_and_unscale",
        variant: None,
        what: format!("{dtype} x {inv}"),
        result,
        tol: ulps(dtype, 1.0),
    });
}

pub(super) fn device(p: &mut Program<'_>) {
    // The device differs by design; that it answers is what is compared.
    let _ = p.b.device();
    p.record_values("device", String::new(), EXACT, Ok(vec![]));
    let r = p.b.synchronize().map(|_| vec![]);
    p.record_values("synchronize", String::new(), EXACT, r);
    let r = p.b.memory().map(|m| vec![Value { dtype: DType::U8, data: vec![f64::from(u8::from(m.is_some()))] }]);
    p.record_values("memory", String::new(), EXACT, r);
    let r = p.b.reset_peak_memory().map(|_| vec![]);
    p.record_values("reset_peak_memory", String::new(), EXACT, r);
    let r = p.b.empty_cache().map(|_| vec![]);
    p.record_values("empty_cache", String::new(), EXACT, r);
}
