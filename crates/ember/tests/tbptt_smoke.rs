//! Truncated backpropagation through time (`ember::tbptt`) on the shipped Shakespeare:
//! detaching the LSTM state at a chunk boundary makes chunk 2's gradients exactly those of
//! a fresh graph started from chunk 1's final state as a constant, and nothing of chunk 1
//! receives a gradient from chunk 2's backward (while without the detach it would); a short
//! training run with the state carried across chunks brings the validation loss below the
//! corpus's unigram entropy. (A correctness check; the full run is
//! `cargo run --release --example tbptt`.)

use ember::char_lm::Corpus;
use ember::nn::Module;
use ember::optim::{Adam, AdamConfig};
use ember::tbptt::{Hidden, LstmLm, ModelConfig, Streams};
use ember::{Result, Tensor, Var, manual_seed};

const BATCH: usize = 8;
const BPTT: usize = 16;

fn corpus() -> Result<Corpus> {
    Corpus::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/shakespeare"))
}

fn small_model(vocab: usize) -> Result<LstmLm> {
    LstmLm::new(vocab, &ModelConfig { embed: 16, hidden: 32, layers: 2 })
}

/// Every parameter's gradient, as bits.
fn gradient_bits(model: &LstmLm) -> Vec<(String, Vec<u32>)> {
    model
        .named_parameters()
        .into_iter()
        .map(|(name, p)| {
            let g = p.grad().unwrap_or_else(|| panic!("{name} has no gradient"));
            (name, g.to_vec::<f32>().unwrap().into_iter().map(f32::to_bits).collect())
        })
        .collect()
}

fn constant(state: &Hidden) -> Hidden {
    Hidden { h: Var::new(state.h.value().copy()), c: Var::new(state.c.value().copy()) }
}

#[test]
fn streams_continue_from_chunk_to_chunk() -> Result<()> {
    let tokens: Vec<i64> = (0..43).collect();
    let streams = Streams::new(&tokens, 4)?;
    assert_eq!((streams.batch(), streams.steps(), streams.num_chunks(4)), (4, 10, 3));
    let (x0, y0) = streams.chunk(0, 4)?;
    let (x2, y2) = streams.chunk(2, 4)?;
    assert_eq!(x0.shape(), &[4, 4]);
    assert_eq!(x0.to_vec::<i64>()?[..4], [0, 1, 2, 3]);
    assert_eq!(x0.to_vec::<i64>()?[4..8], [10, 11, 12, 13]);
    assert_eq!(y0.to_vec::<i64>()?[..4], [1, 2, 3, 4]);
    // The last chunk is shorter: its targets stop at the stream's last token.
    assert_eq!(x2.shape(), &[4, 1]);
    assert_eq!((x2.to_vec::<i64>()?, y2.to_vec::<i64>()?), (vec![8, 18, 28, 38], vec![9, 19, 29, 39]));
    assert!(streams.chunk(3, 4).is_err() && streams.chunk(0, 0).is_err());
    assert!(Streams::new(&tokens, 0).is_err() && Streams::new(&tokens, 30).is_err());
    Ok(())
}

#[test]
fn chunk_two_backward_equals_a_fresh_graph_from_a_constant_state() -> Result<()> {
    manual_seed(0);
    let corpus = corpus()?;
    let model = small_model(corpus.vocab_size())?;
    let streams = Streams::new(corpus.train(), BATCH)?;
    let (x1, y1) = streams.chunk(0, BPTT)?;
    let (x2, y2) = streams.chunk(1, BPTT)?;

    // As in training: chunk 1's backward, then chunk 2 from its detached final state.
    let (loss1, state1) = model.chunk_loss(&x1, &y1, None)?;
    loss1.backward()?;
    model.zero_grad();
    let (loss2, _) = model.chunk_loss(&x2, &y2, Some(&state1.detach()))?;
    loss2.backward()?;
    let tbptt = gradient_bits(&model);

    model.zero_grad();
    let (fresh_loss, _) = model.chunk_loss(&x2, &y2, Some(&constant(&state1)))?;
    fresh_loss.backward()?;
    assert_eq!(loss2.item()?.to_bits(), fresh_loss.item()?.to_bits());
    assert_eq!(tbptt, gradient_bits(&model), "chunk 2's gradients differ from a fresh graph's");

    // The check can fail: without the detach, chunk 2's backward also runs through chunk 1.
    model.zero_grad();
    let (_, attached) = model.chunk_loss(&x1, &y1, None)?;
    model.chunk_loss(&x2, &y2, Some(&attached))?.0.backward()?;
    assert_ne!(tbptt, gradient_bits(&model), "without detach the gradients should include chunk 1");
    Ok(())
}

#[test]
fn chunk_one_gets_no_gradient_from_chunk_two() -> Result<()> {
    manual_seed(0);
    let corpus = corpus()?;
    let model = small_model(corpus.vocab_size())?;
    let streams = Streams::new(corpus.train(), BATCH)?;
    let (x1, y1) = streams.chunk(0, BPTT)?;
    let (x2, y2) = streams.chunk(1, BPTT)?;
    let leaf = |t: Tensor| -> Result<Var> {
        let v = Var::new(t);
        v.requires_grad_(true)?;
        Ok(v)
    };
    // Chunk 1's embedded inputs and initial state are leaves that require grad.
    let (layers, hidden) = (2, 32);
    let run = |detach: bool| -> Result<(Var, Hidden)> {
        let embedded = leaf(model.embed(&x1)?.value().copy())?;
        let h0 = leaf(Tensor::zeros([layers, BATCH, hidden], ember::DType::F32)?)?;
        let c0 = leaf(Tensor::zeros([layers, BATCH, hidden], ember::DType::F32)?)?;
        let start = Hidden { h: h0, c: c0 };
        let (_, state1) = model.loss_of_embedded(&embedded, &y1, Some(&start))?;
        let state1 = if detach { state1.detach() } else { state1 };
        model.zero_grad();
        model.chunk_loss(&x2, &y2, Some(&state1))?.0.backward()?;
        assert!(model.parameters().iter().all(|p| p.grad().is_some()), "chunk 2 trains every parameter");
        Ok((embedded, start))
    };
    let (embedded, start) = run(true)?;
    assert!(embedded.grad().is_none(), "chunk 1's inputs received a gradient from chunk 2");
    assert!(start.h.grad().is_none() && start.c.grad().is_none(), "chunk 1's initial state received a gradient");

    // Without the detach they would.
    let (embedded, start) = run(false)?;
    assert!(embedded.grad().is_some() && start.h.grad().is_some() && start.c.grad().is_some());
    Ok(())
}

#[test]
fn a_short_tbptt_run_beats_the_unigram_entropy() -> Result<()> {
    manual_seed(0);
    let corpus = corpus()?;
    let entropy = corpus.unigram_entropy();
    let model = small_model(corpus.vocab_size())?;
    let mut opt = Adam::new(model.parameters(), AdamConfig { lr: 1e-2, ..Default::default() })?;
    let streams = Streams::new(corpus.train(), BATCH)?;
    let before = model.evaluate(corpus.valid(), BATCH, BPTT, Some(20))?;
    let mut state = None;
    for k in 0..400 {
        let (x, y) = streams.chunk(k, BPTT)?;
        let (loss, next) = model.train_chunk(&mut opt, &x, &y, state.as_ref(), Some(1.0))?;
        assert!(loss.is_finite(), "chunk {k}: loss {loss}");
        assert!(next.h.is_leaf() && !next.h.requires_grad(), "the carried state is detached");
        state = Some(next);
    }
    let after = model.evaluate(corpus.valid(), BATCH, BPTT, Some(20))?;
    println!("validation loss {before:.3} -> {after:.3} nats/char, unigram entropy {entropy:.3}");
    assert!(after < entropy && after < before, "validation loss {before} -> {after}, unigram entropy {entropy}");
    Ok(())
}
