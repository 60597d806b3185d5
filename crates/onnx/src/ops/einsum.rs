//! `Einsum` with explicit (`ij,jk->ik`) or implicit (`ij,jk`) output, any number of
//! operands and `...`. ember has no einsum of its own: each operand is permuted and
//! reshaped onto one axis per letter, the operands are multiplied with broadcasting, and
//! the letters missing from the output are summed (differentiable; the product may be as
//! large as all letters' extents, which is fine for the small contractions exporters
//! write: attention scores, outer products). A letter repeated within an operand (a
//! diagonal) is refused.

use super::{float, float_in, string_attr};
use crate::ir::{Node, Value};
use ember_autograd::Var;
use ember_tensor::{Error, Result};

/// The most elements the broadcast product of the operands may hold.
const PRODUCT_LIMIT: usize = 1 << 26;

/// The letters that stand for the dimensions `...` covers (not valid in equations).
const ELLIPSIS: &[char] = &['0', '1', '2', '3', '4', '5', '6', '7', '8', '9'];

fn bad(equation: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid("onnx", format!("Einsum '{equation}': {why}"))
}

/// An operand's letters, `...` replaced by `dots` ellipsis letters (the last ones).
fn expand_dots(term: &str, dots: usize, equation: &str) -> Result<Vec<char>> {
    let mut out = Vec::new();
    let mut rest = term;
    if let Some(at) = term.find("...") {
        if term[at + 3..].contains("...") {
            return Err(bad(equation, "more than one ... in a term"));
        }
        out.extend(term[..at].chars());
        out.extend(&ELLIPSIS[ELLIPSIS.len() - dots..]);
        rest = &term[at + 3..];
    }
    out.extend(rest.chars());
    if let Some(c) = out.iter().find(|c| !c.is_ascii_alphabetic() && !ELLIPSIS.contains(c)) {
        return Err(bad(equation, format!("unexpected character '{c}'")));
    }
    Ok(out)
}

pub(crate) fn einsum(node: &Node, args: &[Option<Value>]) -> Result<Vec<Value>> {
    let equation: String = string_attr(node, "equation", "")?.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != args.len() {
        return Err(bad(&equation, format!("{} terms for {} inputs", terms.len(), args.len())));
    }
    let xs: Vec<&Var> = (0..args.len()).map(|i| float_in(args, i)).collect::<Result<_>>()?;
    let mut dots = 0;
    let mut letters: Vec<Vec<char>> = Vec::with_capacity(terms.len());
    for (term, x) in terms.iter().zip(&xs) {
        let named = term.replace("...", "").chars().count();
        let rank = x.shape().rank();
        let here = if term.contains("...") { rank.checked_sub(named) } else { (rank == named).then_some(0) };
        let here = here.ok_or_else(|| bad(&equation, format!("term '{term}' for an input of shape {}", x.shape())))?;
        if here > ELLIPSIS.len() {
            return Err(bad(&equation, "... covers too many dimensions"));
        }
        dots = dots.max(here);
        letters.push(expand_dots(term, here, &equation)?);
    }
    for l in &letters {
        let mut seen = l.clone();
        seen.sort_unstable();
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad(&equation, "a letter repeated within a term (a diagonal) is not supported"));
        }
    }
    let out: Vec<char> = match rhs {
        Some(r) => expand_dots(r, dots, &equation)?,
        None => {
            // Implicit output: the ellipsis, then the letters used once, alphabetically.
            let mut once: Vec<char> = ('a'..='z')
                .chain('A'..='Z')
                .filter(|c| letters.iter().flatten().filter(|&&x| x == *c).count() == 1)
                .collect();
            let mut o: Vec<char> = ELLIPSIS[ELLIPSIS.len() - dots..].to_vec();
            o.append(&mut once);
            o
        }
    };
    // Every letter: the output's first, then the summed ones, in order of appearance.
    let mut all = out.clone();
    for &c in letters.iter().flatten() {
        if !all.contains(&c) {
            all.push(c);
        }
    }
    if let Some(c) = out.iter().find(|c| !letters.iter().flatten().any(|x| x == *c)) {
        return Err(bad(&equation, format!("output letter '{c}' is in no input")));
    }
    // The broadcast product holds every letter's extent: refuse one too large to allocate.
    let extent = |c: &char| {
        letters.iter().zip(&xs).filter_map(|(l, x)| l.iter().position(|y| y == c).map(|p| x.shape()[p])).max()
    };
    let size = all.iter().try_fold(1usize, |n, c| n.checked_mul(extent(c).unwrap_or(1)));
    if size.is_none_or(|n| n > PRODUCT_LIMIT) {
        return Err(bad(&equation, format!("the broadcast product would exceed {PRODUCT_LIMIT} elements")));
    }
    let mut product: Option<Var> = None;
    for (x, l) in xs.iter().zip(&letters) {
        // The operand's own letters in the global order, then a size-1 axis for each other.
        let mut perm: Vec<usize> = Vec::with_capacity(l.len());
        let mut shape = Vec::with_capacity(all.len());
        for c in &all {
            match l.iter().position(|x| x == c) {
                Some(p) => {
                    perm.push(p);
                    shape.push(x.shape()[p]);
                }
                None => shape.push(1),
            }
        }
        let v = x.permute(&perm)?.reshape(shape.as_slice())?;
        product = Some(match product {
            None => v,
            Some(p) => p.mul(&v)?,
        });
    }
    let product = product.ok_or_else(|| bad(&equation, "no inputs"))?;
    let summed: Vec<usize> = (out.len()..all.len()).collect();
    let y = if summed.is_empty() { product } else { product.sum(summed, false)? };
    float(y)
}
