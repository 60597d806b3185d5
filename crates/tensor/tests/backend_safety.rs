//! The backend is public and layouts can be built freely in safe code, so every backend
//! entry point must refuse a view that reaches outside its storage (or operands that do not
//! fit together) with an error, instead of reading out of bounds or panicking.

use ember_tensor::backend::cpu::CpuBackend;
use ember_tensor::backend::{Backend, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use ember_tensor::layout::{Layout, Strides};
use ember_tensor::{DType, Shape, Tensor};
use std::panic::{AssertUnwindSafe, catch_unwind};

fn layout(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout::new(Shape::from(shape), Strides::from_slice(strides), offset).unwrap()
}

/// `f` returns an error (and does not panic).
#[track_caller]
fn refused<T>(what: &str, f: impl FnOnce() -> ember_tensor::Result<T>) {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(_)) => panic!("{what}: accepted a view outside its storage"),
        Ok(Err(_)) => {}
        Err(_) => panic!("{what}: panicked instead of returning an error"),
    }
}

#[test]
fn views_outside_their_storage_are_errors() {
    let four = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
    let g = four.storage().read();
    let ok = layout(&[2, 2], &[2, 1], 0);
    let big = Layout::contiguous(Shape::from([1000, 1000]));
    let shifted = layout(&[2, 2], &[2, 1], 1);
    let overflow = layout(&[3, 2], &[usize::MAX / 2, 1], 0);
    let b = CpuBackend;
    for bad in [&big, &shifted, &overflow] {
        refused("matmul lhs", || b.matmul((&g, bad), (&g, &ok)));
        refused("matmul rhs", || b.matmul((&g, &ok), (&g, bad)));
        refused("unary", || b.unary(UnaryOp::Exp, (&g, bad)));
        refused("binary", || b.binary(BinaryOp::Add, (&g, bad), (&g, bad)));
        refused("compare", || b.compare(CmpOp::Lt, (&g, &ok), (&g, bad)));
        refused("compare_scalar", || b.compare_scalar(CmpOp::Lt, (&g, bad), 1.0.into()));
        refused("cast", || b.cast((&g, bad), DType::F64));
        refused("download", || b.download((&g, bad)));
        refused("reduce", || b.reduce(ReduceOp::Sum, (&g, bad), &[0]));
        refused("softmax", || b.softmax((&g, bad), 1, false));
        refused("triangle", || b.triangle((&g, bad), 0, false));
    }
    // Operands that do not fit each other.
    let row = layout(&[2], &[1], 0);
    refused("binary shapes", || b.binary(BinaryOp::Add, (&g, &ok), (&g, &row)));
    refused("matmul shapes", || b.matmul((&g, &ok), (&g, &row)));
    refused("matmul inner extents", || b.matmul((&g, &layout(&[2, 1], &[1, 1], 0)), (&g, &ok)));
    refused("reduce dims", || b.reduce(ReduceOp::Sum, (&g, &ok), &[2]));
    refused("reduce unsorted dims", || b.reduce(ReduceOp::Sum, (&g, &ok), &[1, 0]));
    refused("argmax dims", || b.reduce(ReduceOp::ArgMax, (&g, &ok), &[0, 1]));
    refused("softmax dim", || b.softmax((&g, &ok), 2, false));
    let idx = Tensor::from_vec(vec![0i64, 1], [2]).unwrap();
    let gi = idx.storage().read();
    refused("index_select dim", || b.index_select((&g, &ok), 5, (&gi, &row)));
    refused("index_select index view", || b.index_select((&g, &ok), 0, (&gi, &big)));
    refused("gather rank", || b.gather((&g, &ok), 0, (&gi, &row)));
    // In-place kernels check the destination too.
    drop(g);
    let mut w = four.storage().write();
    refused("fill_", || b.fill_inplace(&mut w, &big, 0.into()));
    refused("unary_inplace", || b.unary_inplace(UnaryOp::Neg, &mut w, &shifted));
    drop(w);
    // A layout that fits is still served.
    let g = four.storage().read();
    let p = b.matmul((&g, &ok), (&g, &ok)).unwrap();
    assert_eq!(p.as_cpu().unwrap().as_slice::<f32>().unwrap(), &[7.0, 10.0, 15.0, 22.0]);
}

#[test]
fn layouts_need_one_stride_per_dimension() {
    assert!(Layout::new(Shape::from([2, 2]), Strides::from_slice(&[1]), 0).is_err());
    assert_eq!(layout(&[3, 2], &[usize::MAX / 2, 1], 0).storage_extent(), None);
    assert_eq!(layout(&[2, 2], &[2, 1], 1).storage_extent(), Some(5));
    assert_eq!(layout(&[0, 2], &[2, 1], 7).storage_extent(), Some(0));
}

#[test]
fn convolution_kernels_refuse_views_and_geometries_that_do_not_fit() {
    use ember_tensor::ops::conv::{ConvGeometry, SlidingWindow};
    let window = SlidingWindow {
        input: [2, 2],
        output: [2, 2],
        kernel: [1, 1],
        stride: [1, 1],
        padding: [0, 0],
        dilation: [1, 1],
    };
    let geom = ConvGeometry { in_channels: 1, out_channels: 1, groups: 1, window };
    let four = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [1, 1, 2, 2]).unwrap();
    let one = Tensor::from_vec(vec![2.0f32], [1, 1, 1, 1]).unwrap();
    let (g, w) = (four.storage().read(), one.storage().read());
    let ok = layout(&[1, 1, 2, 2], &[4, 4, 2, 1], 0);
    let wl = layout(&[1, 1, 1, 1], &[1, 1, 1, 1], 0);
    let b = CpuBackend;
    for bad in [layout(&[1, 1, 2, 2], &[4, 4, 2, 1], 1), layout(&[9, 1, 2, 2], &[4, 4, 2, 1], 0)] {
        refused("conv2d input", || b.conv2d((&g, &bad), (&w, &wl), None, &geom));
        refused("conv_transpose2d input", || b.conv_transpose2d((&g, &bad), (&w, &wl), None, &geom));
        refused("conv2d_weight_grad input", || b.conv2d_weight_grad((&g, &bad), (&g, &ok), &geom));
        refused("conv2d_weight_grad grad", || b.conv2d_weight_grad((&g, &ok), (&g, &bad), &geom));
        refused("unfold", || b.unfold((&g, &bad), &window));
        refused("fold", || b.fold((&g, &bad), &window));
    }
    // Shapes that disagree with the geometry, a bias of the wrong length, a bad geometry.
    refused("conv2d weight shape", || b.conv2d((&g, &ok), (&g, &ok), None, &geom));
    refused("conv2d bias", || b.conv2d((&g, &ok), (&w, &wl), Some((&g, &layout(&[4], &[1], 0))), &geom));
    let zero_stride = ConvGeometry { window: SlidingWindow { stride: [0, 1], ..window }, ..geom };
    refused("zero stride", || b.conv2d((&g, &ok), (&w, &wl), None, &zero_stride));
    let groups = ConvGeometry { groups: 2, ..geom };
    refused("groups", || b.conv2d((&g, &ok), (&w, &wl), None, &groups));
    let far = ConvGeometry { window: SlidingWindow { padding: [usize::MAX, 0], ..window }, ..geom };
    refused("huge padding", || b.conv2d((&g, &ok), (&w, &wl), None, &far));
    let huge = ConvGeometry { window: SlidingWindow { output: [1 << 40, 1 << 40], ..window }, ..geom };
    refused("huge output", || b.conv2d((&g, &ok), (&w, &wl), None, &huge));
    let ints = Tensor::from_vec(vec![1i64, 2, 3, 4], [1, 1, 2, 2]).unwrap();
    let gi = ints.storage().read();
    refused("integer input", || b.conv2d((&gi, &ok), (&w, &wl), None, &geom));
    refused("integer unfold", || b.unfold((&gi, &ok), &window));
    // A view that fits is served: a 1x1 convolution by 2.
    let y = b.conv2d((&g, &ok), (&w, &wl), None, &geom).unwrap();
    assert_eq!(y.as_cpu().unwrap().as_slice::<f32>().unwrap(), &[2.0, 4.0, 6.0, 8.0]);
}
