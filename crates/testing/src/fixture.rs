//! Fixture tensors as `tools/parity/*.py` write them, and parsing a fixture file.

use ember_tensor::{Error, Result, Tensor};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// A tensor in a fixture: `{"dtype": "f32", "shape": [2, 3], "data": [...]}`, the data in
/// row-major order and written as f64 whatever the dtype.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct FixtureTensor {
    /// `"f64"`, `"f32"`, `"i64"` or `"u8"` (ember's dtype names).
    pub dtype: String,
    /// The dimensions.
    pub shape: Vec<usize>,
    /// The elements, row-major.
    pub data: Vec<f64>,
}

impl FixtureTensor {
    /// The tensor in the fixture's own dtype.
    ///
    /// ```
    /// let t: ember_testing::FixtureTensor =
    ///     serde_json::from_str(r#"{"dtype": "i64", "shape": [2], "data": [3, 4]}"#).unwrap();
    /// assert_eq!(t.to_tensor()?.to_vec::<i64>()?, vec![3, 4]);
    /// # Ok::<(), ember_tensor::Error>(())
    /// ```
    pub fn to_tensor(&self) -> Result<Tensor> {
        self.to_tensor_as(&self.dtype)
    }

    /// The tensor converted to `dtype` (a name as in [`FixtureTensor::dtype`]), for
    /// fixtures that store one problem and replay it in several dtypes.
    pub fn to_tensor_as(&self, dtype: &str) -> Result<Tensor> {
        let shape = self.shape.clone();
        // The `as` casts are exact: the fixture holds values of the target dtype.
        match dtype {
            "f64" => Tensor::from_vec(self.data.clone(), shape),
            "f32" => Tensor::from_vec(self.data.iter().map(|&v| v as f32).collect::<Vec<_>>(), shape),
            "i64" => Tensor::from_vec(self.data.iter().map(|&v| v as i64).collect::<Vec<_>>(), shape),
            "u8" => Tensor::from_vec(self.data.iter().map(|&v| v as u8).collect::<Vec<_>>(), shape),
            other => Err(Error::invalid("fixture", format!("a tensor of unknown dtype {other:?}"))),
        }
    }
}

/// Parses the fixture `text` (usually `include_str!` of the file at `path`, which only
/// names it in the message), panicking with that path and the parse error when it does not
/// fit `T`: a test cannot go on without its fixture.
#[track_caller]
pub fn parse_fixture<T: DeserializeOwned>(path: &str, text: &str) -> T {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{path} is not a valid fixture: {e}"))
}
