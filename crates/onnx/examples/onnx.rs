//! Trains the MNIST quick-start MLP briefly, exports it to ONNX, loads the file back and
//! checks that both agree on the test set (largest absolute difference of the logits, and
//! the predictions). It also writes the files `tools/onnx_check.py` compares with ONNX
//! Runtime: the model, a batch of test images and ember's logits for them.
//!
//! ```text
//! cargo run --release --example onnx -- [--train-images 10000] [--data data/mnist]
//!     [--out runs/onnx] [--seed 0]
//! ```

// The flags every example takes, from the facade's examples (this example lives here, not in
// `ember`, so that the examples built with the facade's default features do not build ONNX).
#[path = "../../ember/examples/common/cli.rs"]
mod cli;

use clap::Parser;
use cli::Common;
use ember::nn::{
    Module, StateDict, TransformerActivation, TransformerEncoder, TransformerEncoderLayer, TransformerLayerOptions,
    save_safetensors,
};
use ember::optim::{Adam, AdamConfig};
use ember::{Result, Var, mnist, no_grad};
use ember_onnx::ExportOptions;

#[derive(Parser)]
struct Args {
    /// Train one epoch on the first N training images.
    #[arg(long, default_value_t = 10_000)]
    train_images: usize,
    #[command(flatten)]
    common: Common,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let out = args.common.start("onnx")?;
    let train = mnist::load(&args.common.data, true)?.take(args.train_images)?;
    let test = mnist::load(&args.common.data, false)?;
    let model = mnist::mlp()?;
    let mut opt = Adam::new(model.parameters(), AdamConfig::default())?;
    mnist::train_epoch(&model, &mut opt, None, &mnist::loader(&train, 64, args.common.seed)?, |_, _| {})?;
    let trained = mnist::evaluate(&model, &test)?;
    println!("trained on {} images: test accuracy {:.2}%", train.len(), 100.0 * trained.accuracy);

    let path = out.join("mnist_mlp.onnx");
    let example = Var::new(test.images.narrow(0, 0, 1)?);
    ember_onnx::export(&model, &example, &path, &ExportOptions::default().dynamic_batch(true))?;
    println!(
        "exported {} ({} bytes)",
        path.display(),
        std::fs::metadata(&path).map_err(|e| ember::Error::io(&path, e))?.len()
    );
    let loaded = ember_onnx::load(&path)?;

    let (mut max_diff, mut same) = (0f32, true);
    no_grad(|| -> Result<()> {
        for start in (0..test.len()).step_by(1000) {
            let x = Var::new(test.images.narrow(0, start, 1000.min(test.len() - start))?);
            let (a, b) = (model.forward(&x)?.value(), loaded.forward(&x)?.value());
            let diff =
                a.to_vec::<f32>()?.iter().zip(b.to_vec::<f32>()?).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
            max_diff = max_diff.max(diff);
            same &= a.argmax(1, false)?.to_vec::<i64>()? == b.argmax(1, false)?.to_vec::<i64>()?;
        }
        Ok(())
    })?;
    let reloaded = mnist::evaluate(&loaded, &test)?;
    println!(
        "ember vs reloaded ONNX on {} test images: max abs diff {max_diff:e}, predictions equal: {same}, accuracy {:.2}% vs {:.2}%",
        test.len(),
        100.0 * trained.accuracy,
        100.0 * reloaded.accuracy
    );

    // For tools/onnx_check.py: inputs and ember's outputs for the trained MLP, and for an
    // (untrained) CNN quick-start model and Transformer encoder exported the same way.
    let mut check = StateDict::new();
    let images = test.images.narrow(0, 0, 16)?.contiguous();
    let layer = TransformerEncoderLayer::with_options(
        32,
        4,
        TransformerLayerOptions {
            dim_feedforward: 64,
            batch_first: true,
            activation: TransformerActivation::GELU,
            ..Default::default()
        },
    )?;
    let encoder = TransformerEncoder::new(layer, 2, None)?;
    let cnn = mnist::cnn()?;
    let models: [(&str, &dyn Module, ember::Tensor, bool); 3] = [
        ("mnist_mlp", &model, images.clone(), true),
        ("mnist_cnn", &cnn, images, true),
        ("transformer_encoder", &encoder, ember::Tensor::randn([3, 6, 32])?, false),
    ];
    for (name, m, x, dynamic) in models {
        m.eval();
        let file = out.join(format!("{name}.onnx"));
        ember_onnx::export(m, &Var::new(x.clone()), &file, &ExportOptions::default().dynamic_batch(dynamic))?;
        let y = no_grad(|| m.forward(&Var::new(x.clone())))?.value();
        check.insert(format!("{name}.input"), x);
        check.insert(format!("{name}.expected"), y);
    }
    save_safetensors(out.join("onnx_check.safetensors"), &check)?;
    println!("wrote the files for tools/onnx_check.py to {}", out.display());
    if max_diff != 0.0 || !same {
        return Err(ember::Error::invalid("onnx example", "the reloaded model disagrees with the original"));
    }
    Ok(())
}
