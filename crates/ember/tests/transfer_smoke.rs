//! The transfer example's CI check (`ember::transfer`): pretrain on the digits 0-4, save,
//! reload, freeze the encoder, fine-tune a new head on 5-9. The reloaded model scores as
//! the saved one; the frozen encoder is bit-identical after fine-tuning and holds no
//! gradient; only the head's 645 parameters train; the head learns the new task.

use ember::nn::{Module, ModuleExt};
use ember::optim::{Adam, AdamConfig};
use ember::{Result, manual_seed, mnist, transfer};

#[test]
fn frozen_encoder_stays_bit_identical_while_the_new_head_learns() -> Result<()> {
    manual_seed(0);
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/mnist");
    let train = mnist::load(data, true)?.take(8_000)?;
    let test = mnist::load(data, false)?.take(2_000)?;
    let (low, high) = (transfer::digits(&train, 0..5)?, transfer::digits(&train, 5..10)?);
    let (test_low, test_high) = (transfer::digits(&test, 0..5)?, transfer::digits(&test, 5..10)?);
    assert_eq!(low.len() + high.len(), train.len());
    assert!(high.labels.to_vec::<i64>()?.iter().all(|d| (0..5).contains(d)), "5-9 are relabelled 0-4");

    let model = transfer::classifier()?;
    let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["encoder.0.weight", "encoder.0.bias", "encoder.2.weight", "encoder.2.bias", "head.weight", "head.bias"]
    );
    let adam = AdamConfig { lr: 1e-3, ..Default::default() };
    let mut opt = Adam::new(model.parameters(), adam)?;
    mnist::train_epoch(&model, &mut opt, None, &mnist::loader(&low, 64, 0)?, |_, _| {})?;
    let pretrained = mnist::evaluate(&model, &test_low)?.accuracy;
    assert!(pretrained >= 0.9, "pretrained accuracy on 0-4: {:.2}%", 100.0 * pretrained);

    let dir = std::env::temp_dir().join(format!("ember-transfer-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ember::Error::io(&dir, e))?;
    let path = dir.join("pretrained.safetensors");
    model.save(&path)?;
    let reloaded = transfer::classifier()?;
    reloaded.load(&path)?;
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(mnist::evaluate(&reloaded, &test_low)?.accuracy, pretrained);

    let model = reloaded.with_new_head()?;
    model.freeze_encoder()?;
    assert!(model.encoder().parameters().iter().all(|p| p.is_frozen() && !p.requires_grad()));
    let trainable: usize = model.parameters().iter().filter(|p| p.requires_grad()).map(|p| p.numel()).sum();
    assert_eq!(trainable, 128 * 5 + 5);
    let before = mnist::evaluate(&model, &test_high)?.accuracy;
    let snapshot = model.encoder_snapshot()?;
    // The head alone learns fast: a larger step and a few passes over the small set.
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 5e-3, ..Default::default() })?;
    let loader = mnist::loader(&high, 64, 0)?;
    for _ in 0..3 {
        mnist::train_epoch(&model, &mut opt, None, &loader, |_, _| {})?;
    }
    assert!(model.encoder_snapshot()? == snapshot, "a frozen encoder parameter moved");
    assert!(model.encoder().parameters().iter().all(|p| p.grad().is_none()), "a frozen parameter kept a gradient");
    assert!(model.head().parameters().iter().all(|p| p.grad().is_some()), "the head received no gradient");
    let after = mnist::evaluate(&model, &test_high)?.accuracy;
    assert!(after >= 0.65 && after >= before + 0.3, "accuracy on 5-9: {:.2}% -> {:.2}%", 100.0 * before, 100.0 * after);
    Ok(())
}
