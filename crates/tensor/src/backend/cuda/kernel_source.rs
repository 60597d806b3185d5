//! The kernels' source: `kernels.cu` with the `switch` functions over each op table's codes
//! spliced in, and the op codes the host passes to them.
//!
//! Every row of an op table (`ops/`) with a `cuda` section becomes one `case CODE: return
//! EXPR;` in each of its family's switch functions, where `CODE` is the row's position in its
//! table; [`unary_code`] and its siblings give the same positions to the host, so no code is
//! written by hand. A switch has no `default`: `__trap()` follows it, so a code without a
//! case stops the kernel with an error instead of returning a value. The tests below fail
//! when a row has no CUDA expression where it needs one, which would otherwise only show on
//! a GPU.
//!
//! `kernels.cu` marks where each family's functions go with a line `//@generated FAMILY`.

use crate::ops::{BinaryOp, CmpOp, ReduceOp, UnaryOp};

/// The hand-written part of the source.
const TEMPLATE: &str = include_str!("kernels.cu");

/// The start of a line of `kernels.cu` that the generated functions of a family replace.
const MARKER: &str = "//@generated ";

/// A unary row's CUDA expressions, and whether the CPU computes the op on integers (then the
/// GPU must too).
struct UnaryCuda {
    name: &'static str,
    float: Option<&'static str>,
    int: Option<&'static str>,
    takes_ints: bool,
}

/// A binary row's CUDA expressions.
struct BinaryCuda {
    name: &'static str,
    float: Option<&'static str>,
    int: Option<&'static str>,
}

/// A comparison row's CUDA expression.
struct CompareCuda {
    name: &'static str,
    expr: Option<&'static str>,
}

/// A reduction row's CUDA pieces: for a `value` row its combine, identity and whether it
/// accumulates `f32` in `f64`; for an `arg` row when `a` is preferred to `b`.
struct ReduceCuda {
    name: &'static str,
    arg: bool,
    combine: Option<&'static str>,
    identity: Option<&'static str>,
    widen: bool,
    prefer: Option<&'static str>,
}

/// Turns the unary table's `cuda` sections into [`unary_code`] and [`UNARY`].
macro_rules! unary_cuda {
    ($(
        $(#[$meta:meta])*
        $V:ident $(( $($tp:ident: $tty:tt),* ))? $({ $($(#[$fmeta:meta])* $f:ident: $fty:tt),* })?
            => $method:ident,
            float $float:tt,
            int $int:tt,
            cuda $cuda:tt,
            tensor $tensor:tt,
            grad $grad:tt;
    )*) => {
        /// The unary op codes: each row's position in the table.
        #[repr(i32)]
        enum UnaryCode {
            $( $V, )*
        }

        /// The code of `op` in the kernels' `unary_float` and `unary_int`.
        pub(crate) fn unary_code(op: UnaryOp) -> i32 {
            match op {
                $( UnaryOp::$V { .. } => UnaryCode::$V as i32, )*
            }
        }

        /// Every row's CUDA expressions, in code order.
        const UNARY: &[UnaryCuda] = &[
            $( UnaryCuda {
                name: stringify!($method),
                float: unary_cuda!(@float $cuda),
                int: unary_cuda!(@int $cuda),
                takes_ints: unary_cuda!(@takes_ints $int),
            }, )*
        ];
    };

    (@float [float $e:literal $($rest:tt)*]) => { Some($e) };
    (@float [$($rest:tt)*]) => { None };
    (@int [float $e:literal, int $i:literal $($rest:tt)*]) => { Some($i) };
    (@int [$($rest:tt)*]) => { None };
    (@takes_ints []) => { false };
    (@takes_ints [$($f:tt)+]) => { true };
}

crate::unary_table!(unary_cuda);

/// Turns the binary table's `cuda` sections into [`binary_code`] and [`BINARY`].
macro_rules! binary_cuda {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident,
            cpu $cpu:tt,
            cuda $cuda:tt,
            tensor $tensor:tt,
            grad $grad:tt;
    )*) => {
        /// The binary op codes: each row's position in the table.
        #[repr(i32)]
        enum BinaryCode {
            $( $V, )*
        }

        /// The code of `op` in the kernels' `binary_float` and `binary_int`.
        pub(crate) fn binary_code(op: BinaryOp) -> i32 {
            match op {
                $( BinaryOp::$V => BinaryCode::$V as i32, )*
            }
        }

        /// Every row's CUDA expressions, in code order.
        const BINARY: &[BinaryCuda] = &[
            $( BinaryCuda {
                name: stringify!($method),
                float: binary_cuda!(@float $cuda),
                int: binary_cuda!(@int $cuda),
            }, )*
        ];
    };

    (@float [float $e:literal $($rest:tt)*]) => { Some($e) };
    (@float [$($rest:tt)*]) => { None };
    (@int [float $e:literal, int $i:literal]) => { Some($i) };
    (@int [$($rest:tt)*]) => { None };
}

crate::binary_table!(binary_cuda);

/// Turns the comparison table's `cuda` sections into [`compare_code`] and [`COMPARE`].
macro_rules! compare_cuda {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident, $scalar_method:ident, $symbol:literal, cpu $cpu:tt, cuda [$($e:literal)?];
    )*) => {
        /// The comparison codes: each row's position in the table.
        #[repr(i32)]
        enum CompareCode {
            $( $V, )*
        }

        /// The code of `op` in the kernels' `cmp_op`.
        pub(crate) fn compare_code(op: CmpOp) -> i32 {
            match op {
                $( CmpOp::$V => CompareCode::$V as i32, )*
            }
        }

        /// Every row's CUDA expression, in code order.
        const COMPARE: &[CompareCuda] = &[
            $( CompareCuda { name: stringify!($method), expr: compare_cuda!(@expr $($e)?) }, )*
        ];
    };

    (@expr $e:literal) => { Some($e) };
    (@expr) => { None };
}

crate::compare_table!(compare_cuda);

/// Turns the reduction table's `cuda` sections into [`reduce_code`] and [`REDUCE`].
macro_rules! reduce_cuda {
    ($(
        $(#[$meta:meta])*
        $V:ident => $method:ident, $kind:ident, cpu $cpu:tt, cuda $cuda:tt;
    )*) => {
        /// The reduction codes: each row's position in the table.
        #[repr(i32)]
        enum ReduceCode {
            $( $V, )*
        }

        /// The code of `op` in the kernels' reduction functions.
        pub(crate) fn reduce_code(op: ReduceOp) -> i32 {
            match op {
                $( ReduceOp::$V => ReduceCode::$V as i32, )*
            }
        }

        /// Every row's CUDA pieces, in code order.
        const REDUCE: &[ReduceCuda] = &[ $( reduce_cuda!(@row $method, $kind, $cuda), )* ];
    };

    (@row $method:ident, value, [combine $c:literal, identity $i:literal $(, $widen:ident)?]) => {
        ReduceCuda {
            name: stringify!($method),
            arg: false,
            combine: Some($c),
            identity: Some($i),
            widen: reduce_cuda!(@widen $($widen)?),
            prefer: None,
        }
    };
    (@row $method:ident, arg, [prefer $p:literal]) => {
        ReduceCuda { name: stringify!($method), arg: true, combine: None, identity: None, widen: false, prefer: Some($p) }
    };
    (@row $method:ident, $kind:ident, []) => {
        ReduceCuda {
            name: stringify!($method),
            arg: reduce_cuda!(@is_arg $kind),
            combine: None,
            identity: None,
            widen: false,
            prefer: None,
        }
    };
    (@widen widen) => { true };
    (@widen) => { false };
    (@is_arg value) => { false };
    (@is_arg arg) => { true };
}

crate::reduce_table!(reduce_cuda);

/// One generated function: `signature`, `setup`, a `switch (op)` with one `case` per code
/// that has an expression, `__trap()`, and `fallback` (which keeps the compiler content;
/// `__trap()` never returns).
struct SwitchFn<'a> {
    signature: &'a str,
    setup: &'a str,
    cases: Vec<(usize, &'a str, Option<&'a str>)>,
    fallback: &'a str,
}

impl SwitchFn<'_> {
    fn write(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(out, "{} {{", self.signature);
        if !self.setup.is_empty() {
            let _ = writeln!(out, "    {}", self.setup);
        }
        out.push_str("    switch (op) {\n");
        for &(code, name, expr) in &self.cases {
            if let Some(expr) = expr {
                let _ = writeln!(out, "    case {code}: return {expr}; // {name}");
            }
        }
        out.push_str("    }\n");
        out.push_str("    // A code without a case: stop the kernel rather than return a value.\n");
        out.push_str("    __trap();\n");
        let _ = writeln!(out, "    {}", self.fallback);
        out.push_str("}\n");
    }
}

/// The generated functions of one family (`unary`, `binary`, `compare` or `reduce`).
fn switch_fns(family: &str) -> Vec<SwitchFn<'static>> {
    const ONE_ZERO: &str = "const T one = (T)1, zero = (T)0; (void)one; (void)zero;";
    match family {
        "unary" => vec![
            SwitchFn {
                signature: "template <typename T> __device__ __forceinline__ T unary_float(int op, T x, T p0, T p1)",
                setup: ONE_ZERO,
                cases: UNARY.iter().enumerate().map(|(c, u)| (c, u.name, u.float)).collect(),
                fallback: "return zero;",
            },
            SwitchFn {
                signature: "template <typename T> __device__ __forceinline__ T unary_int(int op, T x, T p0, T p1)",
                setup: ONE_ZERO,
                cases: UNARY.iter().enumerate().map(|(c, u)| (c, u.name, u.int.filter(|_| u.takes_ints))).collect(),
                fallback: "return zero;",
            },
        ],
        "binary" => vec![
            SwitchFn {
                signature: "template <typename T> __device__ __forceinline__ T binary_float(int op, T x, T y)",
                setup: "",
                cases: BINARY.iter().enumerate().map(|(c, b)| (c, b.name, b.float)).collect(),
                fallback: "return (T)0;",
            },
            SwitchFn {
                signature: "template <typename T> __device__ __forceinline__ T binary_int(int op, T x, T y)",
                setup: "",
                cases: BINARY.iter().enumerate().map(|(c, b)| (c, b.name, b.int)).collect(),
                fallback: "return (T)0;",
            },
        ],
        "compare" => vec![SwitchFn {
            signature: "template <typename T> __device__ __forceinline__ u8 cmp_op(int op, T x, T y)",
            setup: "",
            cases: COMPARE.iter().enumerate().map(|(c, k)| (c, k.name, k.expr)).collect(),
            fallback: "return 0;",
        }],
        "reduce" => {
            let value =
                |f: fn(&ReduceCuda) -> Option<&'static str>| -> Vec<(usize, &'static str, Option<&'static str>)> {
                    REDUCE.iter().enumerate().filter(|(_, r)| !r.arg).map(|(c, r)| (c, r.name, f(r))).collect()
                };
            vec![
                SwitchFn {
                    signature: "template <typename T, typename A> __device__ __forceinline__ A combine(int op, A a, A b)",
                    setup: "",
                    cases: value(|r| r.combine),
                    fallback: "return a;",
                },
                SwitchFn {
                    signature: "template <typename T, typename A> __device__ __forceinline__ A identity(int op)",
                    setup: "",
                    cases: value(|r| r.identity),
                    fallback: "return (A)0;",
                },
                SwitchFn {
                    signature: "__device__ __forceinline__ bool accumulates_wide(int op)",
                    setup: "",
                    cases: value(|r| Some(if r.widen { "true" } else { "false" })),
                    fallback: "return false;",
                },
                SwitchFn {
                    signature: "template <typename T> __device__ __forceinline__ bool arg_prefers(int op, T a, T b)",
                    setup: "",
                    cases: REDUCE
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| r.arg)
                        .map(|(c, r)| (c, r.name, r.prefer))
                        .collect(),
                    fallback: "return false;",
                },
            ]
        }
        _ => vec![],
    }
}

/// The complete kernel source: `kernels.cu` with each marker line replaced by its family's
/// generated functions. A marker naming no family becomes an `#error`, so NVRTC names it.
pub(crate) fn source() -> String {
    let mut out = String::with_capacity(TEMPLATE.len() + 16 * 1024);
    for line in TEMPLATE.split_inclusive('\n') {
        let Some(family) = line.trim_end().strip_prefix(MARKER) else {
            out.push_str(line);
            continue;
        };
        let fns = switch_fns(family);
        if fns.is_empty() {
            out.push_str(&format!("#error \"no generated functions for '{family}'\"\n"));
        }
        for f in fns {
            f.write(&mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the rows `missing` picks, for a failure message.
    fn names<T>(rows: &[T], name: impl Fn(&T) -> &'static str, missing: impl Fn(&T) -> bool) -> Vec<&'static str> {
        rows.iter().filter(|r| missing(r)).map(name).collect()
    }

    #[test]
    fn every_unary_op_has_a_cuda_kernel() {
        let no_float = names(UNARY, |u| u.name, |u| u.float.is_none());
        assert!(no_float.is_empty(), "unary ops without a CUDA `float` expression: {no_float:?}");
        let no_int = names(UNARY, |u| u.name, |u| u.takes_ints && u.int.is_none());
        assert!(
            no_int.is_empty(),
            "unary ops the CPU computes on integers without a CUDA `int` expression: {no_int:?}"
        );
        let extra = names(UNARY, |u| u.name, |u| !u.takes_ints && u.int.is_some());
        assert!(extra.is_empty(), "float-only unary ops with a CUDA `int` expression: {extra:?}");
    }

    #[test]
    fn every_binary_op_has_a_cuda_kernel() {
        let missing = names(BINARY, |b| b.name, |b| b.float.is_none() || b.int.is_none());
        assert!(missing.is_empty(), "binary ops without CUDA `float` and `int` expressions: {missing:?}");
    }

    #[test]
    fn every_compare_op_has_a_cuda_kernel() {
        let missing = names(COMPARE, |c| c.name, |c| c.expr.is_none());
        assert!(missing.is_empty(), "comparisons without a CUDA expression: {missing:?}");
    }

    #[test]
    fn every_reduce_op_has_a_cuda_kernel() {
        let missing = names(
            REDUCE,
            |r| r.name,
            |r| {
                if r.arg { r.prefer.is_none() } else { r.combine.is_none() || r.identity.is_none() }
            },
        );
        assert!(missing.is_empty(), "reductions without their CUDA pieces: {missing:?}");
    }

    /// The host's codes are the rows' positions, which the switches use.
    #[test]
    fn op_codes_are_table_positions() {
        let ops = [
            UnaryOp::Neg,
            UnaryOp::Round,
            UnaryOp::Softplus { beta: 1.0, threshold: 2.0 },
            UnaryOp::MinimumScalar(crate::Scalar::Int(1)),
        ];
        for op in ops {
            assert_eq!(UNARY[unary_code(op) as usize].name, op.name());
        }
        assert_eq!(UNARY.len(), UnaryOp::NAMES.len());
        for op in [BinaryOp::Add, BinaryOp::Minimum] {
            assert_eq!(BINARY[binary_code(op) as usize].name, op.name());
        }
        for op in [CmpOp::Eq, CmpOp::Ge] {
            assert_eq!(COMPARE[compare_code(op) as usize].name, op.name());
        }
        for op in [ReduceOp::Sum, ReduceOp::ArgMin] {
            let r = &REDUCE[reduce_code(op) as usize];
            assert_eq!((r.name, r.arg), (op.name(), op.is_arg()));
        }
    }

    /// The body of the generated function whose signature contains `name(`: its lines
    /// between the opening and the closing brace.
    fn function<'a>(src: &'a str, name: &str) -> Vec<&'a str> {
        let open = format!(" {name}(int op");
        let starts: Vec<usize> = src.match_indices(&open).map(|(i, _)| i).collect();
        assert_eq!(starts.len(), 1, "`{name}` is defined {} times", starts.len());
        let body = &src[starts[0]..];
        let end = body.find("\n}\n").unwrap_or_else(|| panic!("`{name}` does not end"));
        body[..end].lines().skip(1).collect()
    }

    /// Checks the generated switch of `name`: exactly one `case` per code of `codes`, each
    /// one `return`, nothing else inside the switch (no `default`, no `break`), and
    /// `__trap()` right after it.
    fn check_switch(src: &str, name: &str, codes: impl Iterator<Item = usize>) {
        let lines = function(src, name);
        let open =
            lines.iter().position(|l| l.trim() == "switch (op) {").unwrap_or_else(|| panic!("{name}: no switch"));
        let close =
            open + lines[open..].iter().position(|l| l.trim() == "}").unwrap_or_else(|| panic!("{name}: open switch"));
        let mut seen = vec![];
        for line in &lines[open + 1..close] {
            let case = line.trim().strip_prefix("case ").unwrap_or_else(|| panic!("{name}: not a case: {line}"));
            let (code, rest) = case.split_once(": ").unwrap_or_else(|| panic!("{name}: malformed case: {line}"));
            let rest = rest.split(" // ").next().unwrap_or(rest);
            assert!(rest.starts_with("return ") && rest.ends_with(';'), "{name}: case {code} does not return: {line}");
            assert_eq!(rest.matches(';').count(), 1, "{name}: case {code} is more than one statement: {line}");
            seen.push(code.parse::<usize>().unwrap_or_else(|_| panic!("{name}: code {code}")));
        }
        let mut want: Vec<usize> = codes.collect();
        want.sort_unstable();
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, want, "{name}: the cases are not one per op code (cases in order: {seen:?})");
        assert_eq!(lines.get(close + 2).map(|l| l.trim()), Some("__trap();"), "{name}: no __trap() after the switch");
        assert!(lines.iter().all(|l| !l.contains("default") && !l.contains("break")), "{name}: default or break");
    }

    #[test]
    fn generated_switches_have_one_case_per_code_and_no_fall_through() {
        let src = source();
        check_switch(&src, "unary_float", 0..UNARY.len());
        check_switch(&src, "unary_int", (0..UNARY.len()).filter(|&c| UNARY[c].takes_ints));
        check_switch(&src, "binary_float", 0..BINARY.len());
        check_switch(&src, "binary_int", 0..BINARY.len());
        check_switch(&src, "cmp_op", 0..COMPARE.len());
        let (values, args): (Vec<usize>, Vec<usize>) = (0..REDUCE.len()).partition(|&c| !REDUCE[c].arg);
        check_switch(&src, "combine", values.iter().copied());
        check_switch(&src, "identity", values.iter().copied());
        check_switch(&src, "accumulates_wide", values.iter().copied());
        check_switch(&src, "arg_prefers", args.into_iter());
    }

    #[test]
    fn every_marker_is_replaced_once() {
        let src = source();
        assert!(!src.contains(MARKER) && !src.contains("#error"), "a marker is left in the source");
        for family in ["unary", "binary", "compare", "reduce"] {
            let marker = format!("{MARKER}{family}\n");
            assert_eq!(TEMPLATE.matches(&marker).count(), 1, "kernels.cu marks `{family}` once");
        }
        let markers = TEMPLATE.lines().filter(|l| l.starts_with(MARKER)).count();
        assert_eq!(markers, 4, "kernels.cu has a marker for an unknown family");
    }
}
