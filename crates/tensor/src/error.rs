//! The one error type of ember.
//!
//! Every fallible operation in every ember crate returns [`Result<T>`]. Messages name the
//! operation and the offending shapes, dtypes, dimensions or files, so that an error read in
//! isolation says what went wrong and where.

use std::path::PathBuf;

/// Everything a user of ember can get wrong, and everything the environment can refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Shapes that do not fit the operation, e.g. `matmul: cannot multiply [2, 3] by [4, 5]`.
    #[error("{op}: {msg}")]
    Shape {
        /// The operation that refused the shapes.
        op: &'static str,
        /// What is wrong, naming the shapes.
        msg: String,
    },
    /// Dtypes the operation cannot combine, naming both.
    #[error("{op}: {msg}")]
    DType {
        /// The operation that refused the dtypes.
        op: &'static str,
        /// What is wrong, naming the dtypes.
        msg: String,
    },
    /// A dimension index outside `-rank..rank`.
    #[error("{op}: dimension {dim} is out of range for a tensor of rank {rank}")]
    Dim {
        /// The operation that received the dimension.
        op: &'static str,
        /// The dimension as given (negative values count from the end).
        dim: i64,
        /// The rank of the tensor.
        rank: usize,
    },
    /// An element index outside the indexed dimension.
    #[error("{op}: {msg}")]
    Index {
        /// The operation that received the index.
        op: &'static str,
        /// Which index and which bound.
        msg: String,
    },
    /// Any other argument that the operation cannot accept.
    #[error("{op}: {msg}")]
    InvalidArgument {
        /// The operation that refused the argument.
        op: &'static str,
        /// What is wrong with it.
        msg: String,
    },
    /// A device that is not available in this build or on this machine.
    #[error("device {device}: {msg}")]
    Device {
        /// The device as written, e.g. `cuda:0`.
        device: String,
        /// Why it cannot be used.
        msg: String,
    },
    /// An allocation that the system refused or that overflows the address space.
    #[error("{op}: cannot allocate {elements} elements of {dtype}")]
    Alloc {
        /// The operation that needed the memory.
        op: &'static str,
        /// The number of elements requested.
        elements: usize,
        /// The dtype name.
        dtype: &'static str,
    },
    /// A misuse of the autograd graph: backward without a scalar root, a saved tensor
    /// modified in place, a gradient of the wrong shape, and the like.
    #[error("{0}")]
    Autograd(String),
    /// An I/O error on a named file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file whose content is not what it should be (bad magic, truncated, wrong count,
    /// checksum mismatch, unknown tensor name...).
    #[error("{}: {msg}", path.display())]
    Format {
        /// The offending file.
        path: PathBuf,
        /// What is wrong with its content.
        msg: String,
    },
}

/// `Result` with ember's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A shape error for `op`.
    pub fn shape(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Shape { op, msg: msg.into() }
    }

    /// A dtype error for `op`.
    pub fn dtype(op: &'static str, msg: impl Into<String>) -> Self {
        Error::DType { op, msg: msg.into() }
    }

    /// An index error for `op`.
    pub fn index(op: &'static str, msg: impl Into<String>) -> Self {
        Error::Index { op, msg: msg.into() }
    }

    /// An invalid-argument error for `op`.
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument { op, msg: msg.into() }
    }

    /// An autograd error.
    pub fn autograd(msg: impl Into<String>) -> Self {
        Error::Autograd(msg.into())
    }

    /// A format error on `path`.
    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Format { path: path.into(), msg: msg.into() }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// For code whose only possible failure is the system refusing memory (an operation
    /// that returns `Tensor`, not `Result`, say): aborts the process the way `Vec` does when
    /// this is [`Error::Alloc`], and gives any other error back to be reported as a bug.
    ///
    /// ```
    /// use ember_tensor::Error;
    /// let e = Error::invalid("op", "bad").abort_if_alloc();
    /// assert!(matches!(e, Error::InvalidArgument { op: "op", .. }));
    /// ```
    pub fn abort_if_alloc(self) -> Self {
        if let Error::Alloc { elements, .. } = self {
            std::alloc::handle_alloc_error(
                std::alloc::Layout::array::<u8>(elements).unwrap_or(std::alloc::Layout::new::<u8>()),
            );
        }
        self
    }

    /// This error with an allocation failure attributed to `op`: for operations built on
    /// others (`zeros` on `full`, `pad` and `repeat` on a fill or a copy), whose users should see the name they
    /// called.
    pub(crate) fn alloc_in(self, op: &'static str) -> Self {
        match self {
            Error::Alloc { elements, dtype, .. } => Error::Alloc { op, elements, dtype },
            other => other,
        }
    }
}

/// Unwraps the result of a kernel that cannot fail on valid input. The only failure left
/// is the system refusing memory, which is handled like `Vec` does.
pub(crate) fn infallible<T>(r: Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => unreachable!("ember internal error: a kernel rejected validated input: {}", e.abort_if_alloc()),
    }
}
