//! The CI smoke training of the character language model: a small causal Transformer on
//! the shipped Shakespeare must bring its validation loss below the corpus's unigram
//! entropy (the best a model without context can do), and sampling must be reproducible
//! from the seed. (A correctness check; the full run is
//! `cargo run --release --example char_lm`.)

use ember::char_lm::{self, CharModel, Corpus, ModelConfig};
use ember::nn::Module;
use ember::optim::{Adam, AdamConfig, Optimizer};
use ember::{Result, manual_seed};

#[test]
fn a_small_model_beats_the_unigram_entropy_and_samples_reproducibly() -> Result<()> {
    manual_seed(0);
    let corpus = Corpus::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/shakespeare"))?;
    assert_eq!(corpus.vocab_size(), corpus.decode(&(0..corpus.vocab_size() as i64).collect::<Vec<_>>()).len());
    let entropy = corpus.unigram_entropy();
    assert!(entropy > 2.5 && entropy < 3.5, "unigram entropy {entropy} nats/char");
    let config = ModelConfig { d_model: 48, heads: 4, layers: 1, context: 32, dropout: 0.0 };
    let model = CharModel::new(corpus.vocab_size(), &config)?;
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 3e-3, ..Default::default() })?;
    let before = model.validation_loss(&corpus, 64)?;
    for _ in 0..250 {
        let starts = char_lm::random_starts(corpus.train(), config.context, 16)?;
        let (x, y) = char_lm::windows(corpus.train(), &starts, config.context)?;
        opt.zero_grad();
        let loss = model.loss(&x, &y)?;
        loss.backward()?;
        opt.step()?;
    }
    let after = model.validation_loss(&corpus, 64)?;
    assert!(after < entropy && after < before, "validation loss {before} -> {after}, unigram entropy {entropy}");

    manual_seed(7);
    let a = model.sample(&corpus, "KING.", 40, 0.8)?;
    manual_seed(7);
    let b = model.sample(&corpus, "KING.", 40, 0.8)?;
    assert_eq!(a.chars().count(), 40);
    assert_eq!(a, b);
    assert!(model.sample(&corpus, "", 5, 0.8).is_err());
    assert!(model.sample(&corpus, "KING.", 5, 0.0).is_err());
    Ok(())
}
