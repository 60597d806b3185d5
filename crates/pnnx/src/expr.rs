//! `pnnx.Expression`: elementwise arithmetic on the operator's inputs, written as nested
//! calls such as `add(@0,mul(@1,2.000000e+00))`.

use ember_autograd::Var;
use ember_tensor::{Result, Tensor};

/// A parsed expression.
#[derive(Clone, Debug)]
pub(crate) enum Expr {
    /// The operator's input `@i`.
    Input(usize),
    /// A number.
    Const(f64),
    /// A function of its arguments.
    Call(Func, Vec<Expr>),
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Func {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Neg,
    Sqrt,
    Rsqrt,
    Exp,
    Log,
}

impl Func {
    fn named(name: &str) -> Option<(Func, usize)> {
        Some(match name {
            "add" => (Func::Add, 2),
            "sub" => (Func::Sub, 2),
            "mul" => (Func::Mul, 2),
            "div" => (Func::Div, 2),
            "pow" => (Func::Pow, 2),
            "neg" => (Func::Neg, 1),
            "sqrt" => (Func::Sqrt, 1),
            "rsqrt" => (Func::Rsqrt, 1),
            "exp" => (Func::Exp, 1),
            "log" => (Func::Log, 1),
            _ => return None,
        })
    }
}

/// Parses `text`, whose inputs must be below `inputs`.
pub(crate) fn parse(text: &str, inputs: usize) -> std::result::Result<Expr, String> {
    let mut p = Parser { s: text.as_bytes(), pos: 0, inputs };
    let e = p.expr(0)?;
    if p.pos != p.s.len() {
        return Err(format!("expression `{text}`: unexpected `{}`", &text[p.pos..]));
    }
    Ok(e)
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    inputs: usize,
}

impl Parser<'_> {
    fn expr(&mut self, depth: usize) -> std::result::Result<Expr, String> {
        if depth > 64 {
            return Err("expression nested more than 64 deep".into());
        }
        let start = self.pos;
        while self.pos < self.s.len() && !matches!(self.s[self.pos], b'(' | b')' | b',') {
            self.pos += 1;
        }
        let token = std::str::from_utf8(&self.s[start..self.pos]).map_err(|_| "expression is not UTF-8".to_string())?;
        if self.s.get(self.pos) == Some(&b'(') {
            let (func, arity) =
                Func::named(token).ok_or_else(|| format!("unsupported expression function `{token}`"))?;
            self.pos += 1;
            let mut args = vec![self.expr(depth + 1)?];
            while self.s.get(self.pos) == Some(&b',') {
                self.pos += 1;
                args.push(self.expr(depth + 1)?);
            }
            if self.s.get(self.pos) != Some(&b')') {
                return Err(format!("`{token}(` is not closed"));
            }
            self.pos += 1;
            if args.len() != arity {
                return Err(format!("`{token}` takes {arity} arguments, not {}", args.len()));
            }
            return Ok(Expr::Call(func, args));
        }
        if let Some(i) = token.strip_prefix('@') {
            let i: usize = i.parse().map_err(|_| format!("`{token}` is not an input"))?;
            if i >= self.inputs {
                return Err(format!("`{token}`, but the operator has {} inputs", self.inputs));
            }
            return Ok(Expr::Input(i));
        }
        token.parse::<f64>().map(Expr::Const).map_err(|_| format!("`{token}` is neither an input, a number nor a call"))
    }
}

impl Expr {
    /// Evaluates the expression on `inputs`; constants take the dtype of the first input.
    pub(crate) fn eval(&self, inputs: &[Var]) -> Result<Var> {
        match self {
            Expr::Input(i) => Ok(inputs[*i].clone()),
            Expr::Const(c) => {
                let (dtype, device) = inputs
                    .first()
                    .map_or((ember_tensor::DType::F32, ember_tensor::Device::Cpu), |v| (v.dtype(), v.device()));
                Ok(Var::new(Tensor::full_on(Vec::<usize>::new(), *c, dtype, device)?))
            }
            Expr::Call(f, args) => {
                let a: Vec<Var> = args.iter().map(|e| e.eval(inputs)).collect::<Result<_>>()?;
                match f {
                    Func::Add => a[0].add(&a[1]),
                    Func::Sub => a[0].sub(&a[1]),
                    Func::Mul => a[0].mul(&a[1]),
                    Func::Div => a[0].div(&a[1]),
                    Func::Pow => a[0].pow(&a[1]),
                    Func::Neg => Ok(a[0].neg()),
                    Func::Sqrt => Ok(a[0].sqrt()),
                    Func::Rsqrt => Ok(a[0].rsqrt()),
                    Func::Exp => Ok(a[0].exp()),
                    Func::Log => Ok(a[0].log()),
                }
            }
        }
    }
}
