//! The convolution layers (`Conv1d`, `Conv2d`, `ConvTranspose1d`, `ConvTranspose2d`) and
//! the functional forms (`conv1d`, `conv2d`, `conv_transpose*`, `unfold`, `fold`): values,
//! parameter names and `state_dict` keys, PyTorch's initialisation, order of draws and
//! repr, options, and errors that name the operation and the shapes.

mod common;

use common::{TempFile, assert_close, values};
use ember_autograd::Var;
use ember_nn::functional as F;
use ember_nn::{
    Conv1d, Conv1dOptions, Conv2d, Conv2dOptions, ConvTranspose1d, ConvTranspose2d, ConvTranspose2dOptions, Module,
    ModuleExt, Sequential,
};
use ember_tensor::{ConvArgs, ConvTransposeArgs, DType, Padding, Tensor, UnfoldArgs, manual_seed};
use parking_lot::{Mutex, MutexGuard};

/// Every test here draws from the global generator (initial weights, inputs), and some
/// seed it and compare draws: each holds this lock throughout, so draws never interleave.
static SEEDED: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    SEEDED.lock()
}

fn randn(shape: &[usize]) -> Var {
    Var::new(Tensor::randn(shape).unwrap())
}

#[test]
fn conv2d_layer_is_the_functional_conv() {
    let _g = lock();
    let conv =
        Conv2d::with_options(4, 6, [3, 2], Conv2dOptions::default().stride(2).padding([1, 0]).groups(2)).unwrap();
    let x = randn(&[2, 4, 9, 8]);
    let y = conv.forward(&x).unwrap();
    assert_eq!(y.shape().dims(), &[2, 6, 5, 4]);
    let args = ConvArgs::default().stride(2).padding([1, 0]).groups(2);
    let want = F::conv2d(&x, conv.weight(), conv.bias(), &args).unwrap();
    assert_eq!(values(&y), values(&want));
    // An unbatched input gives the unbatched result.
    let one = conv.forward(&Var::new(x.value().select(0, 1).unwrap())).unwrap();
    assert_eq!(one.shape().dims(), &[6, 5, 4]);
    assert_eq!(values(&one), values(&Var::new(y.value().select(0, 1).unwrap())));
    assert_eq!((conv.in_channels(), conv.out_channels(), conv.kernel_size()), (4, 6, [3, 2]));
}

#[test]
fn conv1d_layer_with_same_padding_keeps_the_length() {
    let _g = lock();
    let conv = Conv1d::with_options(3, 5, 4, Conv1dOptions::default().padding(Padding::Same).dilation(2)).unwrap();
    let y = conv.forward(&randn(&[2, 3, 11])).unwrap();
    assert_eq!(y.shape().dims(), &[2, 5, 11]);
    let valid = Conv1d::with_options(3, 5, 4, Conv1dOptions::default().padding(Padding::Valid)).unwrap();
    assert_eq!(valid.forward(&randn(&[3, 11])).unwrap().shape().dims(), &[5, 8]);
}

#[test]
fn conv_transpose_layers_invert_the_shapes_of_strided_convolutions() {
    let _g = lock();
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1).groups(2);
    let up = ConvTranspose2d::with_options(4, 6, 3, options).unwrap();
    assert_eq!(up.weight().shape().dims(), &[4, 3, 3, 3]);
    let x = randn(&[2, 4, 5, 6]);
    let y = up.forward(&x).unwrap();
    assert_eq!(y.shape().dims(), &[2, 6, 10, 12]);
    let args = ConvTransposeArgs::default().stride(2).padding(1).output_padding(1).groups(2);
    assert_eq!(values(&y), values(&F::conv_transpose2d(&x, up.weight(), up.bias(), &args).unwrap()));
    let up1 = ConvTranspose1d::new(3, 2, 4).unwrap();
    assert_eq!(up1.forward(&randn(&[1, 3, 5])).unwrap().shape().dims(), &[1, 2, 8]);
    assert_eq!((up.in_channels(), up.out_channels(), up.kernel_size()), (4, 6, [3, 3]));
}

#[test]
fn parameters_are_named_like_pytorch() {
    let _g = lock();
    let conv = Conv2d::new(3, 8, 3).unwrap();
    let names: Vec<String> = conv.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
    assert_eq!(conv.weight().shape().dims(), &[8, 3, 3, 3]);
    let no_bias = Conv2d::with_options(3, 8, 3, Conv2dOptions::default().bias(false)).unwrap();
    assert_eq!(no_bias.state_dict().keys().collect::<Vec<_>>(), ["weight"]);
    let model = Sequential::new().add(Conv2d::new(1, 4, 3).unwrap()).add(ConvTranspose2d::new(4, 1, 3).unwrap());
    assert_eq!(model.state_dict().keys().collect::<Vec<_>>(), ["0.weight", "0.bias", "1.weight", "1.bias"]);
    // A state dict round-trips through a safetensors file.
    let file = TempFile::new("conv_state.safetensors");
    model.save(&file.0).unwrap();
    let other = Sequential::new().add(Conv2d::new(1, 4, 3).unwrap()).add(ConvTranspose2d::new(4, 1, 3).unwrap());
    other.load(&file.0).unwrap();
    for ((_, a), (_, b)) in model.named_parameters().iter().zip(other.named_parameters().iter()) {
        assert_eq!(values(a), values(b));
    }
}

#[test]
fn init_follows_pytorch_and_draws_weight_then_bias() {
    let _g = lock();
    // fan_in = in / groups * kernel elements = 6 / 2 * 3 * 2 = 18.
    manual_seed(11);
    let conv = Conv2d::with_options(6, 4, [3, 2], Conv2dOptions::default().groups(2)).unwrap();
    manual_seed(11);
    let bound = 1.0 / 18f64.sqrt();
    let w = Tensor::uniform([4, 3, 3, 2], -bound, bound, DType::F32).unwrap();
    let b = Tensor::uniform([4], -bound, bound, DType::F32).unwrap();
    assert_eq!(conv.weight().value().to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
    assert_eq!(conv.bias().unwrap().value().to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    // A transposed convolution's fan_in is out / groups * kernel elements (the weight's
    // second dimension): 8 / 2 * 9 = 36.
    manual_seed(12);
    let up =
        ConvTranspose2d::with_options(2, 8, 3, ConvTranspose2dOptions::default().groups(2).dtype(DType::F64)).unwrap();
    manual_seed(12);
    let w = Tensor::uniform([2, 4, 3, 3], -1.0 / 6.0, 1.0 / 6.0, DType::F64).unwrap();
    let b = Tensor::uniform([8], -1.0 / 6.0, 1.0 / 6.0, DType::F64).unwrap();
    assert_eq!(values(up.weight()), w.to_vec::<f64>().unwrap());
    assert_eq!(values(up.bias().unwrap()), b.to_vec::<f64>().unwrap());
}

#[test]
fn init_stays_within_pytorch_bounds() {
    let _g = lock();
    let conv = Conv2d::new(16, 32, 3).unwrap();
    let bound = 1.0 / (16.0f64 * 9.0).sqrt();
    let w = values(conv.weight());
    assert!(w.iter().all(|v| v.abs() <= bound));
    // 4608 draws from U(-b, b) reach close to both ends.
    assert!(w.iter().cloned().fold(f64::MIN, f64::max) > 0.95 * bound);
    assert!(w.iter().cloned().fold(f64::MAX, f64::min) < -0.95 * bound);
    assert!(values(conv.bias().unwrap()).iter().all(|v| v.abs() <= bound));
}

#[test]
fn reprs_are_pytorch_s() {
    let _g = lock();
    let r = |m: &dyn std::fmt::Debug| format!("{m:?}");
    assert_eq!(r(&Conv2d::new(3, 16, 3).unwrap()), "Conv2d(3, 16, kernel_size=(3, 3), stride=(1, 1))");
    let o = Conv2dOptions::default().stride([2, 1]).padding(Padding::Valid).dilation(2).groups(3).bias(false);
    assert_eq!(
        r(&Conv2d::with_options(3, 6, [1, 5], o).unwrap()),
        "Conv2d(3, 6, kernel_size=(1, 5), stride=(2, 1), padding=valid, dilation=(2, 2), groups=3, bias=False)"
    );
    let same = Conv1dOptions::default().padding(Padding::Same);
    assert_eq!(
        r(&Conv1d::with_options(4, 4, 3, same).unwrap()),
        "Conv1d(4, 4, kernel_size=(3,), stride=(1,), padding=same)"
    );
    let t = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1).dilation(2).groups(2);
    assert_eq!(
        r(&ConvTranspose2d::with_options(4, 2, 3, t).unwrap()),
        "ConvTranspose2d(4, 2, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(2, 2), \
         output_padding=(1, 1), groups=2)"
    );
    assert_eq!(r(&ConvTranspose1d::new(2, 3, 4).unwrap()), "ConvTranspose1d(2, 3, kernel_size=(4,), stride=(1,))");
}

#[test]
fn f64_layers_take_f64_inputs() {
    let _g = lock();
    let conv = Conv2d::with_options(2, 3, 3, Conv2dOptions::default().dtype(DType::F64)).unwrap();
    let y = conv.forward(&Var::new(Tensor::normal([1, 2, 4, 4], 0.0, 1.0, DType::F64).unwrap())).unwrap();
    assert_eq!(y.dtype(), DType::F64);
    let e = conv.forward(&randn(&[1, 2, 4, 4])).unwrap_err().to_string();
    assert!(e.contains("conv2d") && e.contains("f32") && e.contains("f64"), "{e}");
}

#[test]
fn bad_configurations_are_errors() {
    let _g = lock();
    let err = |r: ember_tensor::Result<Conv2d>| r.map(|_| ()).unwrap_err().to_string();
    let e = err(Conv2d::with_options(3, 4, 3, Conv2dOptions::default().groups(2)));
    assert!(e.contains("Conv2d") && e.contains("in_channels (3) must be divisible by groups (2)"), "{e}");
    let e = err(Conv2d::with_options(4, 3, 3, Conv2dOptions::default().groups(2)));
    assert!(e.contains("out_channels (3) must be divisible by groups (2)"), "{e}");
    assert!(err(Conv2d::with_options(4, 4, 3, Conv2dOptions::default().groups(0))).contains("groups"));
    assert!(err(Conv2d::new(4, 4, 0)).contains("kernel_size"));
    assert!(err(Conv2d::with_options(4, 4, 3, Conv2dOptions::default().stride(0))).contains("stride"));
    let e = err(Conv2d::with_options(4, 4, 3, Conv2dOptions::default().stride(2).padding(Padding::Same)));
    assert!(e.contains("strided"), "{e}");
    assert!(err(Conv2d::with_options(4, 4, 3, Conv2dOptions::default().dtype(DType::I64))).contains("float"));
    let t = ConvTranspose2d::with_options(4, 4, 3, ConvTranspose2dOptions::default().stride(2).output_padding(2));
    assert!(t.map(|_| ()).unwrap_err().to_string().contains("output padding must be smaller"));
    let w = Var::param(Tensor::randn([4, 3, 3]).unwrap());
    let e = Conv2d::from_params(w, None, ConvArgs::default()).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("4 dimensions") && e.contains("[4, 3, 3]"), "{e}");
    let w = Var::param(Tensor::randn([4, 3, 3, 3]).unwrap());
    let b = Var::param(Tensor::randn([3]).unwrap());
    let e = Conv2d::from_params(w, Some(b), ConvArgs::default()).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("bias of shape [4]"), "{e}");
}

#[test]
fn bad_inputs_are_errors_naming_the_op_and_shapes() {
    let _g = lock();
    let conv = Conv2d::new(3, 4, 3).unwrap();
    let e = conv.forward(&randn(&[2, 5, 8, 8])).unwrap_err().to_string();
    assert!(e.contains("conv2d") && e.contains("[2, 5, 8, 8]") && e.contains("3 channels"), "{e}");
    let e = conv.forward(&randn(&[8, 8])).unwrap_err().to_string();
    assert!(e.contains("conv2d") && e.contains("3-d (unbatched) or 4-d (batched)") && e.contains("[8, 8]"), "{e}");
    let e = conv.forward(&randn(&[1, 3, 2, 2])).unwrap_err().to_string();
    assert!(e.contains("Kernel size can't be greater than actual input size"), "{e}");
    let e = conv.forward(&Var::new(Tensor::zeros([1, 3, 4, 4], DType::I64).unwrap())).unwrap_err().to_string();
    assert!(e.contains("conv2d") && e.contains("i64"), "{e}");
    let x = randn(&[1, 4, 5, 5]);
    let w = randn(&[4, 2, 3, 3]);
    let e = F::conv_transpose2d(&x, &w, Some(&randn(&[3])), &ConvTransposeArgs::default()).unwrap_err().to_string();
    assert!(e.contains("conv_transpose2d") && e.contains("bias") && e.contains("[3]"), "{e}");
    let e =
        F::conv_transpose2d(&randn(&[1, 3, 5, 5]), &w, None, &ConvTransposeArgs::default()).unwrap_err().to_string();
    assert!(e.contains("conv_transpose2d") && e.contains("4 channels, but got 3"), "{e}");
    let e = F::conv1d(&randn(&[1, 4, 5]), &randn(&[4, 4, 3, 3]), None, &ConvArgs::default()).unwrap_err().to_string();
    assert!(e.contains("conv1d") && e.contains("3-d weight") && e.contains("[4, 4, 3, 3]"), "{e}");
    let e = F::unfold(&randn(&[1, 1, 2, 2]), &UnfoldArgs::new(3)).unwrap_err().to_string();
    assert!(e.contains("unfold") && e.contains("at least one"), "{e}");
    let e = F::fold(&randn(&[1, 10, 4]), [3, 3], &UnfoldArgs::new(2)).unwrap_err().to_string();
    assert!(e.contains("fold") && e.contains("divisible by the product of kernel_size"), "{e}");
    let e = F::fold(&randn(&[1, 8, 5]), [3, 3], &UnfoldArgs::new(2)).unwrap_err().to_string();
    assert!(e.contains("fold") && e.contains("sliding blocks 2 * 2 = 4") && e.contains("5"), "{e}");
}

#[test]
fn layers_train_end_to_end() {
    let _g = lock();
    // A small encoder-decoder learns to reproduce its input better after a few steps.
    manual_seed(5);
    let model = Sequential::new()
        .add(Conv2d::with_options(1, 4, 3, Conv2dOptions::default().stride(2).padding(1)).unwrap())
        .add(ember_nn::Tanh)
        .add(ConvTranspose2d::with_options(4, 1, 4, ConvTranspose2dOptions::default().stride(2).padding(1)).unwrap());
    let x = Var::new(Tensor::randn([4, 1, 8, 8]).unwrap());
    let loss = |m: &Sequential| m.forward(&x).unwrap().sub(&x).unwrap().square().mean_all();
    let first = loss(&model).item().unwrap();
    for _ in 0..30 {
        let l = loss(&model);
        model.zero_grad();
        l.backward().unwrap();
        for p in model.parameters() {
            p.value().add_scaled_(&p.grad().unwrap(), -0.1).unwrap();
        }
    }
    let last = loss(&model).item().unwrap();
    assert!(last < 0.8 * first, "loss went from {first} to {last}");
    assert_close(&[values(&model.forward(&x).unwrap()).len() as f64], &[256.0], 0.0);
}
