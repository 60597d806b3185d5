//! The tensor side of the optimizers' kernels: fused update steps, which write a parameter
//! and its state in place in one pass, and the per-tensor part of a gradient norm.

use super::Tensor;
use crate::backend::{AdamState, RmsPropState};
use crate::ops::optim::{AdamStep, RmsPropStep, SgdStep};
use crate::storage::StorageCell;
use crate::{Error, Result};
use smallvec::SmallVec;

/// An error unless the written tensors and the gradient live on one device and no two of
/// them share storage (each storage is locked once, and a write must not alias a read).
fn check_operands(op: &'static str, writes: &[(&str, &Tensor)], grad: &Tensor) -> Result<()> {
    let all = writes.iter().copied().chain([("the gradient", grad)]);
    for (i, (a, ta)) in all.clone().enumerate() {
        ta.same_device(op, grad)?;
        if let Some((b, _)) = all.clone().skip(i + 1).find(|(_, tb)| tb.shares_storage(ta)) {
            return Err(Error::invalid(op, format!("{a} and {b} share storage")));
        }
    }
    Ok(())
}

impl Tensor {
    /// One SGD step on this parameter in place ([`SgdStep`]): one fused pass over the
    /// parameter, its gradient and (with momentum) its momentum buffer, which is given
    /// exactly when `momentum != 0`. All operands are contiguous with the parameter's shape
    /// and float dtype. The writes bump the versions of the parameter and the buffer.
    ///
    /// ```
    /// use ember_tensor::ops::optim::SgdStep;
    /// use ember_tensor::Tensor;
    /// let p = Tensor::from_vec(vec![1.0f64, 2.0], [2])?;
    /// let g = Tensor::from_vec(vec![0.5f64, -0.5], [2])?;
    /// let hp = SgdStep { lr: 0.1, momentum: 0.0, dampening: 0.0, nesterov: false, weight_decay: 0.0, fresh_buffer: false };
    /// p.sgd_step_(&g, None, &hp)?;
    /// assert_eq!(p.to_vec::<f64>()?, vec![0.95, 2.05]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn sgd_step_(&self, grad: &Tensor, momentum_buffer: Option<&Tensor>, hp: &SgdStep) -> Result<()> {
        let op = "sgd_step";
        let mut writes: SmallVec<[(&str, &Tensor); 4]> = SmallVec::new();
        writes.push(("the parameter", self));
        writes.extend(momentum_buffer.map(|b| ("the momentum buffer", b)));
        check_operands(op, &writes, grad)?;
        let cells: SmallVec<[&StorageCell; 4]> = writes.iter().map(|(_, t)| &**t.storage).collect();
        let (mut w, g) = super::locks::write_all_and_read(&cells, &grad.storage);
        let (p, rest) = split_first(&mut w)?;
        let buffer = rest.first_mut().zip(momentum_buffer).map(|(s, t)| (&mut **s, &t.layout));
        self.backend().sgd_step((p, &self.layout), (&g, &grad.layout), buffer, hp)
    }

    /// One Adam or AdamW step on this parameter in place ([`AdamStep`]): one fused pass over
    /// the parameter, its gradient and its state; `max_exp_avg_sq` is given exactly when
    /// `amsgrad` is on. All operands are contiguous with the parameter's shape and float
    /// dtype. The writes bump the versions of the parameter and the state.
    pub fn adam_step_(
        &self,
        grad: &Tensor,
        exp_avg: &Tensor,
        exp_avg_sq: &Tensor,
        max_exp_avg_sq: Option<&Tensor>,
        hp: &AdamStep,
    ) -> Result<()> {
        let op = "adam_step";
        let mut writes: SmallVec<[(&str, &Tensor); 4]> = SmallVec::new();
        writes.extend([("the parameter", self), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)]);
        writes.extend(max_exp_avg_sq.map(|t| ("max_exp_avg_sq", t)));
        check_operands(op, &writes, grad)?;
        let cells: SmallVec<[&StorageCell; 4]> = writes.iter().map(|(_, t)| &**t.storage).collect();
        let (mut w, g) = super::locks::write_all_and_read(&cells, &grad.storage);
        let (p, rest) = split_first(&mut w)?;
        let (m, rest) = split_first(rest)?;
        let (v, rest) = split_first(rest)?;
        let state = AdamState {
            exp_avg: (m, &exp_avg.layout),
            exp_avg_sq: (v, &exp_avg_sq.layout),
            max_exp_avg_sq: rest.first_mut().zip(max_exp_avg_sq).map(|(s, t)| (&mut **s, &t.layout)),
        };
        self.backend().adam_step((p, &self.layout), (&g, &grad.layout), state, hp)
    }

    /// One RMSprop step on this parameter in place ([`RmsPropStep`]): one fused pass over the
    /// parameter, its gradient and its state; `grad_avg` is given exactly when `centered` is
    /// on, `momentum_buffer` exactly when `momentum > 0`. All operands are contiguous with
    /// the parameter's shape and float dtype. The writes bump the versions of the parameter
    /// and the state.
    pub fn rmsprop_step_(
        &self,
        grad: &Tensor,
        square_avg: &Tensor,
        grad_avg: Option<&Tensor>,
        momentum_buffer: Option<&Tensor>,
        hp: &RmsPropStep,
    ) -> Result<()> {
        let op = "rmsprop_step";
        let mut writes: SmallVec<[(&str, &Tensor); 4]> = SmallVec::new();
        writes.extend([("the parameter", self), ("square_avg", square_avg)]);
        writes.extend(grad_avg.map(|t| ("grad_avg", t)));
        writes.extend(momentum_buffer.map(|t| ("the momentum buffer", t)));
        check_operands(op, &writes, grad)?;
        let cells: SmallVec<[&StorageCell; 4]> = writes.iter().map(|(_, t)| &**t.storage).collect();
        let (mut w, g) = super::locks::write_all_and_read(&cells, &grad.storage);
        let (p, rest) = split_first(&mut w)?;
        let (s, mut rest) = split_first(rest)?;
        let grad_avg = match grad_avg {
            Some(t) => {
                let (a, r) = split_first(rest)?;
                rest = r;
                Some((a, &t.layout))
            }
            None => None,
        };
        let momentum_buffer = rest.first_mut().zip(momentum_buffer).map(|(s, t)| (&mut **s, &t.layout));
        let state = RmsPropState { square_avg: (s, &square_avg.layout), grad_avg, momentum_buffer };
        self.backend().rmsprop_step((p, &self.layout), (&g, &grad.layout), state, hp)
    }

    /// `Σ|x|^p` over the elements of a float tensor, accumulated in `f64`, or `max |x|` for
    /// `p = f64::INFINITY` (NaN if any element is NaN): this tensor's part of a total
    /// `p`-norm, as gradient clipping adds them up.
    ///
    /// ```
    /// use ember_tensor::Tensor;
    /// let g = Tensor::from_vec(vec![3.0f32, -4.0], [2])?;
    /// assert_eq!(g.power_sum(2.0)?, 25.0);
    /// assert_eq!(g.power_sum(f64::INFINITY)?, 4.0);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn power_sum(&self, p: f64) -> Result<f64> {
        self.read(|v| self.backend().power_sum(v, p))
    }
}

/// The first storage of a list of write guards and the rest.
fn split_first<'s, 'g>(
    w: &'s mut [parking_lot::RwLockWriteGuard<'g, crate::storage::Storage>],
) -> Result<(&'s mut crate::storage::Storage, &'s mut [parking_lot::RwLockWriteGuard<'g, crate::storage::Storage>])> {
    match w.split_first_mut() {
        Some((first, rest)) => Ok((&mut **first, rest)),
        None => Err(Error::invalid("step", "ember internal error: a storage was not locked")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    /// Steps whose operands swap roles between threads (one's parameter is another's
    /// gradient or state) finish: every step takes its locks in the global order. The test
    /// fails after two minutes instead of hanging if that breaks; it takes milliseconds.
    #[test]
    fn crossed_steps_do_not_deadlock() {
        use std::sync::mpsc;
        use std::time::Duration;
        let [a, b, c] = [0; 3].map(|_| Tensor::zeros([4096], DType::F32).unwrap());
        let hp =
            SgdStep { lr: 0.0, momentum: 0.5, dampening: 0.0, nesterov: false, weight_decay: 0.0, fresh_buffer: false };
        let (tx, rx) = mpsc::channel();
        let spawn = |f: Box<dyn Fn() + Send>| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for _ in 0..2000 {
                    f();
                }
                let _ = tx.send(());
            })
        };
        let (a1, b1, c1, a2, b2, c2, a3, b3) =
            (a.clone(), b.clone(), c.clone(), a.clone(), b.clone(), c.clone(), a.clone(), b.clone());
        let threads = [
            spawn(Box::new(move || a1.sgd_step_(&b1, Some(&c1), &hp).unwrap())),
            spawn(Box::new(move || c2.sgd_step_(&a2, Some(&b2), &hp).unwrap())),
            spawn(Box::new(move || b3.add_(&a3).unwrap())),
        ];
        for _ in 0..threads.len() {
            rx.recv_timeout(Duration::from_secs(120)).expect("crossed optimizer steps deadlocked");
        }
        for t in threads {
            t.join().unwrap();
        }
    }
}
