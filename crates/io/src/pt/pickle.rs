//! Writing [`PtValue`]s as the pickle that `torch.save` writes (protocol 2), with tensors
//! as persistent references to storage records.

use super::storage::StorageKind;
use super::value::PtValue;
use crate::le::le_bytes;
use ember_tensor::Result;

/// A pickle being written, and the storages its tensors refer to (record name, bytes).
pub(crate) struct Pickler {
    out: Vec<u8>,
    storages: Vec<(String, Vec<u8>)>,
}

impl Pickler {
    pub(crate) fn new() -> Pickler {
        // PROTO 2, as torch.save writes by default.
        Pickler { out: vec![0x80, 2], storages: Vec::new() }
    }

    /// The pickle (ended with STOP) and the storages.
    pub(crate) fn finish(mut self) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
        self.out.push(b'.');
        (self.out, self.storages)
    }

    /// Writes `v`; a dict is written as an `OrderedDict` when `ordered` (a module's
    /// `state_dict()` is one).
    pub(crate) fn value(&mut self, v: &PtValue, ordered: bool) -> Result<()> {
        match v {
            PtValue::None => self.out.push(b'N'),
            PtValue::Bool(b) => self.out.push(if *b { 0x88 } else { 0x89 }),
            PtValue::Int(i) => self.int(*i),
            PtValue::Float(f) => {
                self.out.push(b'G');
                self.out.extend(f.to_be_bytes());
            }
            PtValue::Str(s) => self.str(s),
            PtValue::Tuple(items) => self.tuple(items)?,
            PtValue::List(items) => {
                self.out.push(b']');
                if !items.is_empty() {
                    self.out.push(b'(');
                    for it in items {
                        self.value(it, false)?;
                    }
                    self.out.push(b'e');
                }
            }
            PtValue::Dict(entries) => {
                if ordered {
                    self.global("collections", "OrderedDict");
                    self.out.extend([b')', b'R']);
                } else {
                    self.out.push(b'}');
                }
                if !entries.is_empty() {
                    self.out.push(b'(');
                    for (k, v) in entries {
                        self.value(k, false)?;
                        self.value(v, false)?;
                    }
                    self.out.push(b'u');
                }
            }
            PtValue::Tensor(t) => {
                // _rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())
                let key = self.storages.len().to_string();
                let shape: Vec<usize> = t.shape().to_vec();
                let mut strides = vec![1usize; shape.len()];
                for d in (0..shape.len().saturating_sub(1)).rev() {
                    strides[d] = strides[d + 1] * shape[d + 1];
                }
                self.global("torch._utils", "_rebuild_tensor_v2");
                self.out.push(b'(');
                self.out.push(b'(');
                self.str("storage");
                self.global("torch", StorageKind::class_for(t.dtype()));
                self.str(&key);
                self.str("cpu");
                self.int(t.numel() as i64);
                self.out.push(b't');
                self.out.push(b'Q');
                self.int(0);
                self.ints(&shape);
                self.ints(&strides);
                self.out.push(0x89);
                self.global("collections", "OrderedDict");
                self.out.extend([b')', b'R']);
                self.out.push(b't');
                self.out.push(b'R');
                self.storages.push((key, le_bytes(t)?));
            }
        }
        Ok(())
    }

    fn tuple(&mut self, items: &[PtValue]) -> Result<()> {
        match items.len() {
            0 => self.out.push(b')'),
            n @ 1..=3 => {
                for it in items {
                    self.value(it, false)?;
                }
                self.out.push(0x84 + n as u8);
            }
            _ => {
                self.out.push(b'(');
                for it in items {
                    self.value(it, false)?;
                }
                self.out.push(b't');
            }
        }
        Ok(())
    }

    /// A tuple of integers (a size or a stride).
    fn ints(&mut self, values: &[usize]) {
        let n = values.len();
        if n > 3 {
            self.out.push(b'(');
        }
        for &v in values {
            self.int(v as i64);
        }
        match n {
            0 => self.out.push(b')'),
            1..=3 => self.out.push(0x84 + n as u8),
            _ => self.out.push(b't'),
        }
    }

    fn int(&mut self, v: i64) {
        if (0..256).contains(&v) {
            self.out.extend([b'K', v as u8]);
        } else if (0..65536).contains(&v) {
            self.out.push(b'M');
            self.out.extend((v as u16).to_le_bytes());
        } else if let Ok(small) = i32::try_from(v) {
            self.out.push(b'J');
            self.out.extend(small.to_le_bytes());
        } else {
            self.out.extend([0x8a, 8]);
            self.out.extend(v.to_le_bytes());
        }
    }

    fn str(&mut self, s: &str) {
        self.out.push(b'X');
        self.out.extend((s.len() as u32).to_le_bytes());
        self.out.extend(s.as_bytes());
    }

    fn global(&mut self, module: &str, name: &str) {
        self.out.push(b'c');
        self.out.extend(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend(name.as_bytes());
        self.out.push(b'\n');
    }
}
