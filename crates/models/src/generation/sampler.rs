//! Choosing the next token from a row of logits: the logits processors in the order
//! transformers applies them (repetition penalty, temperature, top-k, top-p) and a seeded
//! sampler with its own random stream.

use super::config::GenerationConfig;
use ember_tensor::{Error, Result};

/// Applies `config`'s logits processors to one row of `scores` in place, in transformers'
/// order: the repetition penalty over the tokens in `history` (the prompt and what was
/// generated), then, when sampling, the temperature, top-k and top-p. Removed tokens get
/// `-inf`. Greedy decoding (`do_sample = false`) applies the repetition penalty only, as
/// transformers does.
///
/// ```
/// use ember_models::generation::{process_logits, GenerationConfig};
/// let mut scores = vec![1.0f32, 3.0, 2.0, 0.5];
/// let config = GenerationConfig { top_k: Some(2), ..GenerationConfig::sampling(8, 0) };
/// process_logits(&mut scores, &[], &config)?;
/// assert_eq!(scores, [f32::NEG_INFINITY, 3.0, 2.0, f32::NEG_INFINITY]);
/// # Ok::<(), ember_tensor::Error>(())
/// ```
///
/// Errors: a token of `history` outside the vocabulary, or a configuration
/// [`GenerationConfig::validate`] refuses.
pub fn process_logits(scores: &mut [f32], history: &[u32], config: &GenerationConfig) -> Result<()> {
    const OP: &str = "process_logits";
    config.validate()?;
    let penalty = config.repetition_penalty as f32;
    if penalty != 1.0 {
        let mut seen = vec![false; scores.len()];
        for &t in history {
            let slot = seen.get_mut(t as usize).ok_or_else(|| {
                Error::index(OP, format!("token {t} of the history is outside a vocabulary of {}", scores.len()))
            })?;
            // Each distinct token is penalised once, however often it occurred.
            if !std::mem::replace(slot, true) {
                let s = &mut scores[t as usize];
                *s = if *s < 0.0 { *s * penalty } else { *s / penalty };
            }
        }
    }
    if !config.do_sample {
        return Ok(());
    }
    let temperature = config.temperature as f32;
    if temperature != 1.0 {
        scores.iter_mut().for_each(|s| *s /= temperature);
    }
    if let Some(k) = config.top_k.filter(|&k| k > 0 && k < scores.len()) {
        top_k(scores, k);
    }
    if let Some(p) = config.top_p.filter(|&p| p < 1.0) {
        top_p(scores, p as f32);
    }
    Ok(())
}

/// Keeps the scores at least as large as the `k`-th largest (ties with it survive, as in
/// transformers' `scores < topk(..)[-1]`).
fn top_k(scores: &mut [f32], k: usize) {
    let mut sorted: Vec<f32> = scores.to_vec();
    sorted.sort_unstable_by(|a, b| b.total_cmp(a));
    let threshold = sorted[k - 1];
    scores.iter_mut().filter(|s| **s < threshold).for_each(|s| *s = f32::NEG_INFINITY);
}

/// Nucleus filtering as transformers does it: sort ascending, remove the tokens whose
/// cumulative probability stays within `1 - p`, always keeping the most likely one.
fn top_p(scores: &mut [f32], p: f32) {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    // A stable sort keeps equal scores in index order, as torch's sort does on CPU.
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let max = scores[order[order.len() - 1]];
    let exps: Vec<f32> = order.iter().map(|&i| (scores[i] - max).exp()).collect();
    let total: f32 = exps.iter().sum();
    let mut cumulative = 0.0f32;
    let last = order.len() - 1;
    let mut removed = Vec::new();
    for (rank, (&i, e)) in order.iter().zip(&exps).enumerate() {
        cumulative += e / total;
        if cumulative <= 1.0 - p && rank != last {
            removed.push(i);
        }
    }
    removed.into_iter().for_each(|i| scores[i] = f32::NEG_INFINITY);
}

/// Draws tokens from processed scores with a random stream of its own (seeded, so that a
/// generation can be repeated, and independent of ember's global generator).
#[derive(Clone, Debug)]
pub struct Sampler {
    state: u64,
}

impl Sampler {
    /// A sampler whose draws follow from `seed` alone.
    pub fn new(seed: u64) -> Sampler {
        Sampler { state: seed }
    }

    /// The next uniform number in `[0, 1)` (SplitMix64, 53 bits).
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A token drawn from `softmax(scores)` (scores of `-inf` are never drawn).
    ///
    /// Errors: empty scores, or scores without a finite value.
    pub fn sample(&mut self, scores: &[f32]) -> Result<u32> {
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if !max.is_finite() {
            return Err(Error::invalid(
                "Sampler::sample",
                format!("no token can be drawn from {} scores without a finite one", scores.len()),
            ));
        }
        let weights: Vec<f64> = scores.iter().map(|&s| f64::from(s - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        let mut target = self.uniform() * total;
        let mut chosen = 0;
        for (i, w) in weights.iter().enumerate() {
            if *w > 0.0 {
                chosen = i;
                if target < *w {
                    break;
                }
                target -= w;
            }
        }
        Ok(chosen as u32)
    }
}

/// The index of the largest score (the first one on ties, as `argmax` does).
pub(crate) fn argmax(scores: &[f32]) -> u32 {
    let mut best = 0;
    for (i, s) in scores.iter().enumerate() {
        if *s > scores[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative_scores_once() {
        let mut scores = vec![2.0f32, -2.0, 1.0];
        let config = GenerationConfig { repetition_penalty: 2.0, ..GenerationConfig::greedy(4) };
        process_logits(&mut scores, &[0, 1, 0], &config).unwrap();
        assert_eq!(scores, [1.0, -4.0, 1.0]);
        assert!(process_logits(&mut scores, &[3], &config).is_err());
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        // Probabilities 0.5, 0.3, 0.2 after softmax of their logs.
        let mut scores: Vec<f32> = [0.5f32, 0.3, 0.2].iter().map(|p| p.ln()).collect();
        top_p(&mut scores, 0.7);
        assert!(scores[0].is_finite() && scores[1].is_finite() && scores[2] == f32::NEG_INFINITY);
        let mut one: Vec<f32> = [0.5f32, 0.3, 0.2].iter().map(|p| p.ln()).collect();
        top_p(&mut one, 0.0);
        assert_eq!(one.iter().filter(|s| s.is_finite()).count(), 1);
    }

    #[test]
    fn samples_follow_the_distribution_and_the_seed() {
        let scores: Vec<f32> = [0.6f32, 0.0, 0.4].iter().map(|p| p.ln()).collect();
        let mut sampler = Sampler::new(7);
        let draws: Vec<u32> = (0..4000).map(|_| sampler.sample(&scores).unwrap()).collect();
        assert!(!draws.contains(&1));
        let zeros = draws.iter().filter(|&&t| t == 0).count() as f64 / 4000.0;
        assert!((zeros - 0.6).abs() < 0.03, "{zeros}");
        let mut again = Sampler::new(7);
        assert!(draws.iter().all(|&t| again.sample(&scores).unwrap() == t));
        assert!(Sampler::new(1).sample(&[f32::NEG_INFINITY]).is_err());
    }
}
