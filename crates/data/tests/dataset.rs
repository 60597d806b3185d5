//! `TensorDataset` and the default `Dataset::get_batch`.

use ember_data::{Dataset, TensorDataset};
use ember_tensor::{DType, Result, Tensor};

/// Ten samples: a 2x3 `f32` matrix filled with the index, and the index as a label.
fn ten() -> TensorDataset {
    let x =
        Tensor::arange(0, 10).unwrap().to_dtype(DType::F32).reshape([10, 1, 1]).unwrap().repeat(&[1, 2, 3]).unwrap();
    TensorDataset::new(vec![x, Tensor::arange(0, 10).unwrap()]).unwrap()
}

/// A dataset with only `get`, so that batches come from the default `get_batch`.
struct OneByOne(TensorDataset);

impl Dataset for OneByOne {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn get(&self, index: usize) -> Result<Vec<Tensor>> {
        self.0.get(index)
    }
}

#[test]
fn samples_are_rows_of_every_field() {
    let ds = ten();
    assert_eq!(ds.len(), 10);
    assert!(!ds.is_empty());
    let s = ds.get(7).unwrap();
    assert_eq!(s[0].shape(), &[2, 3]);
    assert_eq!(s[0].to_vec::<f32>().unwrap(), vec![7.0; 6]);
    assert_eq!(s[1].shape(), &[] as &[usize]);
    assert_eq!(s[1].to_scalar::<i64>().unwrap(), 7);
    let e = ds.get(10).unwrap_err().to_string();
    assert!(e.contains("index 10 is out of range for a dataset of 10 samples"), "{e}");
    assert_eq!(ds.fields().len(), 2);
}

#[test]
fn index_select_batches_equal_stacked_samples() {
    let fast = ten();
    let slow = OneByOne(ten());
    let indices = [9, 0, 4, 4, 2];
    let a = fast.get_batch(&indices).unwrap();
    let b = slow.get_batch(&indices).unwrap();
    assert_eq!(a.len(), 2);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.shape(), y.shape());
        assert_eq!(x.dtype(), y.dtype());
        assert_eq!(x.to_vec_f64().unwrap(), y.to_vec_f64().unwrap());
    }
    assert_eq!(a[0].shape(), &[5, 2, 3]);
    assert_eq!(a[1].to_vec::<i64>().unwrap(), vec![9, 0, 4, 4, 2]);

    let e = fast.get_batch(&[1, 10]).unwrap_err().to_string();
    assert!(e.contains("TensorDataset::get_batch: index 10 is out of range"), "{e}");
    assert!(slow.get_batch(&[1, 10]).is_err());
    // No indices: zero rows from index_select, an error from stacking nothing.
    assert_eq!(fast.get_batch(&[]).unwrap()[0].shape(), &[0, 2, 3]);
    let e = slow.get_batch(&[]).unwrap_err().to_string();
    assert!(e.contains("cannot build a batch from no indices"), "{e}");
}

#[test]
fn default_batches_need_matching_samples() {
    /// Sample 1 has one field fewer than the others.
    struct Ragged;
    impl Dataset for Ragged {
        fn len(&self) -> usize {
            3
        }
        fn get(&self, index: usize) -> Result<Vec<Tensor>> {
            let x = Tensor::scalar(index as f32);
            Ok(if index == 1 { vec![x] } else { vec![x.clone(), x] })
        }
    }
    let e = Ragged.get_batch(&[0, 1]).unwrap_err().to_string();
    assert!(e.contains("sample 1 of the batch has 1 fields but sample 0 has 2"), "{e}");
    assert_eq!(Ragged.get_batch(&[0, 2]).unwrap()[1].to_vec::<f32>().unwrap(), vec![0.0, 2.0]);
}

#[test]
fn fields_must_share_their_first_dimension() {
    let images = Tensor::zeros([5, 28, 28], DType::U8).unwrap();
    let labels = Tensor::zeros([4], DType::I64).unwrap();
    let e = TensorDataset::new(vec![images.clone(), labels]).unwrap_err().to_string();
    assert!(e.contains("field 1 of shape [4] holds 4 samples but field 0 of shape [5, 28, 28] holds 5"), "{e}");
    let e = TensorDataset::new(vec![]).unwrap_err().to_string();
    assert!(e.contains("expected at least one field"), "{e}");
    let e = TensorDataset::new(vec![images, Tensor::scalar(1i64)]).unwrap_err().to_string();
    assert!(e.contains("field 1 is a scalar"), "{e}");
    let empty = TensorDataset::new(vec![Tensor::zeros([0, 3], DType::F32).unwrap()]).unwrap();
    assert!(empty.is_empty());
}
