//! `Op::export` and `export::trace_graph`: what file writers see of a recorded graph.

use ember_autograd::export::{ExportAttr, trace_graph};
use ember_autograd::{BackwardCtx, Grads, Op, Var};
use ember_tensor::{DType, Result, Tensor};

#[test]
fn trace_lists_inputs_before_users_with_descriptions() -> Result<()> {
    let x = Var::new(Tensor::ones([2, 3], DType::F32)?);
    let w = Var::param(Tensor::ones([4, 3], DType::F32)?);
    let y = x.linear(&w, None)?.relu().reshape([8])?.mul_scalar(2.0);
    let nodes = trace_graph(&[&y]);
    let kinds: Vec<String> = nodes
        .iter()
        .map(|n| n.op.as_ref().map_or("leaf".into(), |d| d.as_ref().map_or("error".into(), |d| d.kind.clone())))
        .collect();
    assert_eq!(kinds, ["leaf", "leaf", "linear", "relu", "reshape", "mul_scalar"]);
    assert!(nodes[0].var.same_node(&x) && nodes[1].var.same_node(&w));
    assert_eq!(nodes[2].inputs, [0, 1]);
    let reshape = nodes[4].op.as_ref().expect("an op").as_ref().expect("a description");
    assert_eq!(reshape.get("shape"), Some(&ExportAttr::Ints(vec![8])));
    let scale = nodes[5].op.as_ref().expect("an op").as_ref().expect("a description");
    assert_eq!(scale.get("value"), Some(&ExportAttr::Float(2.0)));
    Ok(())
}

/// An operation of a user's own, without an export description.
struct Twice;

impl Op for Twice {
    fn name(&self) -> &str {
        "twice"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].mul_scalar(2.0))
    }
    fn backward(&self, _: &BackwardCtx<'_>, g: &Var) -> Result<Grads> {
        Ok([Some(g.mul_scalar(2.0))].into_iter().collect())
    }
}

#[test]
fn an_op_without_description_is_an_error_naming_it() -> Result<()> {
    let x = Var::new(Tensor::ones([2], DType::F32)?);
    let y = Var::apply_op(Twice, &[&x])?;
    let nodes = trace_graph(&[&y]);
    let err = nodes[1].op.as_ref().expect("an op").as_ref().expect_err("no description").to_string();
    assert!(err.contains("operation 'twice' has no export description"), "{err}");
    Ok(())
}
