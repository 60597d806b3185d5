//! A strided matrix operand ([`Mat`]): what the matrix products' kernels, `gemm`'s and
//! ember's own, read their operands through.

/// A matrix addressed by its first element and its row and column strides in elements.
#[derive(Clone, Copy)]
pub(super) struct Mat<T> {
    pub ptr: *const T,
    pub rs: isize,
    pub cs: isize,
}
// SAFETY: a `Mat` only reads the matrix it addresses, which outlives the product.
unsafe impl<T> Send for Mat<T> {}
unsafe impl<T> Sync for Mat<T> {}
