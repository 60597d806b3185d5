//! A dynamic batch: the function is traced a second time on inputs one sample larger, and
//! the sizes that change between the two traces are the ones that follow the batch. Shapes
//! that the graph writes (reshape and expand targets, constants such as a recurrent layer's
//! zero state) are then written so that ONNX computes them from the batch instead.

use ember_autograd::export::{TracedNode, trace_graph};
use ember_autograd::{Var, enable_grad};
use ember_tensor::{Result, Tensor};

/// The second trace, on `examples` with one more sample (the first repeated) in every input
/// that leads with the first input's batch; `None` where that trace fails or records a
/// graph of another structure (the exporter then falls back to assuming the batch leads).
pub(super) fn second_trace(
    f: &impl Fn(&[Var]) -> Result<Vec<Var>>,
    examples: &[Var],
    first: &[TracedNode],
) -> Result<Option<Vec<TracedNode>>> {
    let Some(batch) = examples.first().and_then(|x| x.shape().dims().first().copied()) else {
        return Ok(None);
    };
    if batch == 0 {
        return Ok(None);
    }
    let mut inputs = Vec::with_capacity(examples.len());
    for x in examples {
        let v = x.value();
        inputs.push(Var::new(if v.shape().dims().first() == Some(&batch) {
            Tensor::cat(&[&v, &v.narrow(0, 0, 1)?], 0)?
        } else {
            v
        }));
    }
    let Ok(outputs) = enable_grad(|| f(&inputs)) else { return Ok(None) };
    let nodes = trace_graph(&outputs.iter().collect::<Vec<_>>());
    let kind = |n: &TracedNode| n.op.as_ref().map(|d| d.as_ref().ok().map(|d| d.kind.clone()));
    let same =
        nodes.len() == first.len() && nodes.iter().zip(first).all(|(a, b)| a.inputs == b.inputs && kind(a) == kind(b));
    Ok(same.then_some(nodes))
}

/// The one dimension in which `a` and `b` differ, if exactly one does.
pub(super) fn the_batch_dim(a: &[i64], b: &[i64]) -> Option<usize> {
    if a.len() != b.len() {
        return None;
    }
    let mut diff = (0..a.len()).filter(|&i| a[i] != b[i]);
    let i = diff.next()?;
    diff.next().is_none().then_some(i)
}
