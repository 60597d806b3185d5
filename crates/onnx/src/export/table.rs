//! The operations the exporter maps, with the ONNX form each takes: the single list that
//! `docs/interop.md`'s export table is rendered from ([`crate::tables::export_table`]),
//! and that a test holds the writer to (every kind listed is lowered, none refused as
//! unmapped).

/// `(ember operation kinds, their ONNX form)`, one row of the table each.
pub(crate) static EXPORTS: &[(&[&str], &str)] = &[
    (&["add", "sub", "mul", "div", "pow", "matmul"], "`Add`, `Sub`, `Mul`, `Div`, `Pow`, `MatMul`"),
    (
        &["add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar", "div_scalar", "rdiv_scalar", "pow_scalar"],
        "the binary operator with a 0-d initializer",
    ),
    (&["maximum", "minimum", "maximum_scalar", "minimum_scalar"], "`Max`, `Min` (the scalar as a 0-d initializer)"),
    (
        &[
            "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "neg", "abs", "sin", "cos", "erf", "sign", "floor",
            "ceil", "round", "recip",
        ],
        "the ONNX operator of the same name (`recip`: `Reciprocal`)",
    ),
    (
        &["square", "rsqrt", "silu", "gelu", "gelu_tanh"],
        "`Mul(x, x)`; `Reciprocal(Sqrt)`; `Mul(x, Sigmoid(x))`; the `Erf` form; the `Tanh` form",
    ),
    (&["linear"], "`Gemm` (`transB = 1`) on 2-d inputs, else `MatMul` + `Add`"),
    (
        &["conv1d", "conv2d"],
        "`Conv` (1-d on planes of height 1; `\"same\"` with an even kernel pads one more after than before)",
    ),
    (&["conv_transpose1d", "conv_transpose2d"], "`ConvTranspose` with `output_padding`"),
    (&["max_pool1d", "max_pool2d"], "`MaxPool` with `pads`, `dilations`, `ceil_mode`"),
    (
        &["avg_pool1d", "avg_pool2d"],
        "`AveragePool` with `pads`, `ceil_mode`, `count_include_pad`; with a divisor override, the pool's matrices",
    ),
    (
        &["adaptive_avg_pool1d", "adaptive_avg_pool2d"],
        "`AveragePool` when the output size divides the input; otherwise the pool's matrices",
    ),
    (
        &["adaptive_max_pool1d", "adaptive_max_pool2d"],
        "per window and dimension `Slice` + `ReduceMax`, `Concat` (exact)",
    ),
    (
        &["upsample_nearest", "upsample_linear"],
        "`Resize`: `nearest` as `asymmetric` + `floor`, linear modes as `align_corners` or `pytorch_half_pixel`; \
         scales or sizes; other scale factors as the map's matrices",
    ),
    (
        &["channel_norm"],
        "its statistics: `ReduceMean` over every dimension but 1, `Sub`, `Mul`, `Add`, `Sqrt`, `Div`, then \
         `Reshape`d weight and bias (group norm, instance norm)",
    ),
    (
        &["lstm_sequence"],
        "unrolled step by step: `MatMul`, `Add`, `Slice`, `Sigmoid`/`Tanh`, `Mul`, `Unsqueeze`, `Concat`",
    ),
    (&["reshape", "permute", "expand", "slice"], "`Reshape`, `Transpose`, `Expand`, `Slice`"),
    (&["cat", "index_select"], "`Concat`, `Gather`"),
    (&["sum"], "`ReduceSum`"),
    (&["softmax", "log_softmax", "to_dtype"], "`Softmax`, `LogSoftmax`, `Cast`"),
    (&["where_cond", "masked_fill"], "`Where` (with a `Cast` to bool)"),
    (
        &["scaled_dot_product_attention", "attention"],
        "decomposed: `MatMul`, `Mul`, bool mask `Where(mask, s, -inf)` or float mask `Add`, causal mask `Add`, \
         `Softmax`, `MatMul`; with a mask, rows without any key are 0 (`ReduceMax`, `Equal`, `Where`)",
    ),
    (&["contiguous", "copy", "detach"], "`Identity`"),
];
