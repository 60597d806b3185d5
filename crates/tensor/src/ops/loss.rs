//! The fused classification loss a backend provides: what it computes from class scores and
//! class-index targets.
//!
//! The scores are `[C]` (one sample, a 0-d target), `[N, C]` (targets `[N]`) or
//! `[N, C, d1, ..]` (classes along dimension 1, targets `[N, d1, ..]`). Each position of the
//! target picks a *row*: the `C` scores of that sample (and spatial position).

/// What the scores of a [`ClassLoss`] are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClassScores {
    /// Unnormalised logits: the loss applies log-softmax over the classes first
    /// (PyTorch's `cross_entropy`).
    Logits,
    /// Log-probabilities, used as they are (PyTorch's `nll_loss`).
    LogProbs,
}

/// How the per-row losses of a [`ClassLoss`] combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LossReduction {
    /// One loss per row, in the target's shape (ignored rows are 0).
    None,
    /// The sum over the rows, a 0-d result.
    Sum,
    /// The sum divided by the number of rows whose target is not ignored, a 0-d result
    /// (NaN when every target is ignored, as in PyTorch).
    Mean,
}

/// A classification loss of class-index targets, computed in one pass per row.
///
/// With `s` a row's log-probabilities (the log-softmax of the logits, or the scores
/// themselves for [`ClassScores::LogProbs`]), `t` its target, `C` the number of classes and
/// `e` the label smoothing, the row's loss is
/// `-((1 - e) * s[t] + (e / C) * sum_c s[c])`: the cross-entropy against the target mixed
/// with the uniform distribution. A row whose target equals `ignore_index` contributes
/// nothing, to the smoothing term neither, and its gradient is 0.
///
/// The gradient with respect to the scores, for an incoming gradient `g` of the reduced
/// result, is per row `w * (softmax(x) - q)` for logits and `-w * q` for log-probabilities,
/// where `q = (1 - e) * onehot(t) + e / C` is the smoothed target and `w` is the row's `g`
/// (its own entry for [`LossReduction::None`]) divided, for [`LossReduction::Mean`], by the
/// number of rows that count.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClassLoss {
    /// Logits or log-probabilities.
    pub scores: ClassScores,
    /// `e` above, in `[0, 1]`.
    pub label_smoothing: f64,
    /// A target value whose rows are ignored; any other target must lie in `0..C`.
    pub ignore_index: Option<i64>,
    /// How the rows combine.
    pub reduction: LossReduction,
}

impl ClassLoss {
    /// The loss's name in errors: `cross_entropy` for logits, `nll_loss` for
    /// log-probabilities.
    pub fn name(&self) -> &'static str {
        match self.scores {
            ClassScores::Logits => "cross_entropy",
            ClassScores::LogProbs => "nll_loss",
        }
    }

    /// The class dimension of scores of rank `rank`: 0 for a single sample `[C]`, else 1.
    pub fn class_dim(rank: usize) -> usize {
        usize::from(rank > 1)
    }

    /// Whether a row with target `t` is ignored.
    pub fn ignores(&self, t: i64) -> bool {
        self.ignore_index == Some(t)
    }
}
