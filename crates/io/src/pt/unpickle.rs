//! A restricted reader of Python's pickle format, for the pickles inside PyTorch
//! checkpoints.
//!
//! Like `torch.load(weights_only=True)`, it builds only plain data (numbers, strings,
//! tuples, lists, dicts and tensors) and calls only the handful of functions PyTorch's
//! checkpoints name (`collections.OrderedDict`, `torch._utils._rebuild_tensor_v2`,
//! `torch._utils._rebuild_parameter` and the storage classes); any other global is an
//! error, so a checkpoint can never run code. Every length in the file is checked against
//! the bytes that remain before anything is allocated, and the values built are bounded by
//! a budget proportional to the file's size, so a hostile pickle (one that references a big
//! list from itself again and again) is an error rather than an exhausted memory.

use super::storage::{Elements, StorageKind};
use super::value::PtValue;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Reads a storage record: its key and the bytes it must hold, to its bytes.
pub(crate) type StorageReader<'a> = dyn FnMut(&str, usize) -> Result<Vec<u8>, String> + 'a;

/// Nesting deeper than this is refused (PyTorch's checkpoints nest a few levels).
const MAX_DEPTH: usize = 256;

/// A function a checkpoint may call.
#[derive(Clone, Copy, Debug)]
enum Global {
    OrderedDict,
    RebuildTensor,
    RebuildParameter,
    Storage(StorageKind),
}

/// A storage a tensor refers to: its bytes (read from the archive once, shared by every
/// tensor that views it) and element kind.
struct Storage {
    kind: StorageKind,
    key: String,
    bytes: Rc<Vec<u8>>,
}

/// An object on the unpickler's stack. Lists and dicts are shared and mutable, as in
/// Python, because the memo hands out references to them.
#[derive(Clone)]
enum Obj {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Tuple(Rc<Vec<Obj>>),
    List(Rc<RefCell<Vec<Obj>>>),
    Dict(Rc<RefCell<Vec<(Obj, Obj)>>>),
    Global(Global),
    Storage(Rc<Storage>),
    Tensor(ember_tensor::Tensor),
}

impl Obj {
    fn kind(&self) -> &'static str {
        match self {
            Obj::None => "None",
            Obj::Bool(_) => "bool",
            Obj::Int(_) => "int",
            Obj::Float(_) => "float",
            Obj::Str(_) => "str",
            Obj::Tuple(_) => "tuple",
            Obj::List(_) => "list",
            Obj::Dict(_) => "dict",
            Obj::Global(_) => "class",
            Obj::Storage(_) => "storage",
            Obj::Tensor(_) => "tensor",
        }
    }
}

/// A stack entry: an object or the mark that `MARK` pushes.
enum Item {
    Mark,
    Obj(Obj),
}

/// Reads the pickle `data`; `storage(key, bytes_needed)` returns the bytes of the storage
/// record `key`, which must hold exactly `bytes_needed` bytes. `budget` bounds the number of
/// values built and the elements of the tensors built (in bytes).
pub(crate) fn unpickle(data: &[u8], storage: &mut StorageReader<'_>, budget: usize) -> Result<PtValue, String> {
    let mut vm = Machine { data, pos: 0, stack: Vec::new(), memo: HashMap::new(), storages: HashMap::new(), budget };
    let top = vm.run(storage)?;
    let mut nodes = 0usize;
    to_value(&top, 0, &mut nodes, vm.budget)
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Item>,
    memo: HashMap<u32, Obj>,
    storages: HashMap<String, Rc<Storage>>,
    budget: usize,
}

impl Machine<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(format!("the pickle ends early: {n} more bytes needed at byte {}", self.pos));
        };
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn line(&mut self) -> Result<String, String> {
        let rest = &self.data[self.pos..];
        let len = rest.iter().position(|&b| b == b'\n').ok_or("the pickle ends inside a GLOBAL name")?;
        let text = std::str::from_utf8(&rest[..len]).map_err(|_| "a GLOBAL name is not UTF-8".to_string())?;
        self.pos += len + 1;
        Ok(text.to_string())
    }

    fn text(&mut self, len: usize) -> Result<Obj, String> {
        let bytes = self.take(len)?;
        let s = std::str::from_utf8(bytes).map_err(|_| "a string is not UTF-8".to_string())?;
        Ok(Obj::Str(Rc::from(s)))
    }

    fn push(&mut self, obj: Obj) {
        self.stack.push(Item::Obj(obj));
    }

    fn pop(&mut self, op: &str) -> Result<Obj, String> {
        match self.stack.pop() {
            Some(Item::Obj(o)) => Ok(o),
            Some(Item::Mark) => Err(format!("{op} found a MARK where it expected a value")),
            None => Err(format!("{op} on an empty stack")),
        }
    }

    fn top(&mut self, op: &str) -> Result<&Obj, String> {
        match self.stack.last() {
            Some(Item::Obj(o)) => Ok(o),
            _ => Err(format!("{op} needs a value on the stack")),
        }
    }

    /// The objects pushed since the last mark, which is removed.
    fn pop_mark(&mut self, op: &str) -> Result<Vec<Obj>, String> {
        let at =
            self.stack.iter().rposition(|i| matches!(i, Item::Mark)).ok_or_else(|| format!("{op} without a MARK"))?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        Ok(items.into_iter().filter_map(|i| if let Item::Obj(o) = i { Some(o) } else { None }).collect())
    }

    fn run(&mut self, storage: &mut StorageReader<'_>) -> Result<Obj, String> {
        loop {
            let at = self.pos;
            let op = self.byte()?;
            match op {
                0x80 => {
                    let proto = self.byte()?;
                    if proto > 5 {
                        return Err(format!("pickle protocol {proto} is newer than 5"));
                    }
                }
                0x95 => {
                    self.take(8)?;
                }
                b'.' => return self.pop("STOP"),
                b'(' => self.stack.push(Item::Mark),
                b'N' => self.push(Obj::None),
                0x88 => self.push(Obj::Bool(true)),
                0x89 => self.push(Obj::Bool(false)),
                b'K' => {
                    let v = self.byte()?;
                    self.push(Obj::Int(i64::from(v)));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.push(Obj::Int(i64::from(v)));
                }
                b'J' => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.push(Obj::Int(i64::from(v)));
                }
                0x8a => {
                    let n = usize::from(self.byte()?);
                    if n > 8 {
                        return Err(format!("an integer of {n} bytes does not fit in 64 bits"));
                    }
                    let bytes = self.take(n)?;
                    let mut v: i64 = 0;
                    for (i, &b) in bytes.iter().enumerate() {
                        v |= i64::from(b) << (8 * i);
                    }
                    // Sign-extend from the top byte's sign bit.
                    if n > 0 && n < 8 && bytes[n - 1] & 0x80 != 0 {
                        v |= -1i64 << (8 * n);
                    }
                    self.push(Obj::Int(v));
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.le()?);
                    self.push(Obj::Float(v));
                }
                b'X' => {
                    let len = u32::from_le_bytes(self.le()?) as usize;
                    let s = self.text(len)?;
                    self.push(s);
                }
                0x8c => {
                    let len = usize::from(self.byte()?);
                    let s = self.text(len)?;
                    self.push(s);
                }
                0x8d => {
                    let len = u64::from_le_bytes(self.le()?);
                    let len = usize::try_from(len).map_err(|_| format!("a string of {len} bytes"))?;
                    let s = self.text(len)?;
                    self.push(s);
                }
                b')' => self.push(Obj::Tuple(Rc::new(Vec::new()))),
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n {
                        return Err(format!("TUPLE{n} on a stack of {}", self.stack.len()));
                    }
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop("TUPLE")?);
                    }
                    items.reverse();
                    self.push(Obj::Tuple(Rc::new(items)));
                }
                b't' => {
                    let items = self.pop_mark("TUPLE")?;
                    self.push(Obj::Tuple(Rc::new(items)));
                }
                b']' => self.push(Obj::List(Rc::new(RefCell::new(Vec::new())))),
                b'l' => {
                    let items = self.pop_mark("LIST")?;
                    self.push(Obj::List(Rc::new(RefCell::new(items))));
                }
                b'}' => self.push(Obj::Dict(Rc::new(RefCell::new(Vec::new())))),
                b'd' => {
                    let items = self.pop_mark("DICT")?;
                    let dict = Rc::new(RefCell::new(Vec::new()));
                    set_items(&dict, items)?;
                    self.push(Obj::Dict(dict));
                }
                b'a' => {
                    let v = self.pop("APPEND")?;
                    match self.top("APPEND")? {
                        Obj::List(l) => l.borrow_mut().push(v),
                        other => return Err(format!("APPEND to a {}", other.kind())),
                    }
                }
                b'e' => {
                    let items = self.pop_mark("APPENDS")?;
                    match self.top("APPENDS")? {
                        Obj::List(l) => l.borrow_mut().extend(items),
                        other => return Err(format!("APPENDS to a {}", other.kind())),
                    }
                }
                b's' => {
                    let v = self.pop("SETITEM")?;
                    let k = self.pop("SETITEM")?;
                    match self.top("SETITEM")? {
                        Obj::Dict(d) => set_items(d, vec![k, v])?,
                        other => return Err(format!("SETITEM on a {}", other.kind())),
                    }
                }
                b'u' => {
                    let items = self.pop_mark("SETITEMS")?;
                    match self.top("SETITEMS")? {
                        Obj::Dict(d) => set_items(d, items)?,
                        other => return Err(format!("SETITEMS on a {}", other.kind())),
                    }
                }
                b'q' => {
                    let i = u32::from(self.byte()?);
                    self.memoize(i)?;
                }
                b'r' => {
                    let i = u32::from_le_bytes(self.le()?);
                    self.memoize(i)?;
                }
                0x94 => {
                    let i = u32::try_from(self.memo.len()).map_err(|_| "the memo is full".to_string())?;
                    self.memoize(i)?;
                }
                b'h' => {
                    let i = u32::from(self.byte()?);
                    self.recall(i)?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(self.le()?);
                    self.recall(i)?;
                }
                b'0' => {
                    self.stack.pop().ok_or("POP on an empty stack")?;
                }
                b'1' => {
                    self.pop_mark("POP_MARK")?;
                }
                b'2' => {
                    let top = self.top("DUP")?.clone();
                    self.push(top);
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = global(&module, &name)?;
                    self.push(Obj::Global(g));
                }
                0x93 => {
                    let name = self.pop("STACK_GLOBAL")?;
                    let module = self.pop("STACK_GLOBAL")?;
                    let (Obj::Str(module), Obj::Str(name)) = (module, name) else {
                        return Err("STACK_GLOBAL needs two strings".into());
                    };
                    let g = global(&module, &name)?;
                    self.push(Obj::Global(g));
                }
                b'Q' => {
                    let pid = self.pop("BINPERSID")?;
                    let s = self.persistent(pid, storage)?;
                    self.push(Obj::Storage(s));
                }
                b'R' => {
                    let args = self.pop("REDUCE")?;
                    let f = self.pop("REDUCE")?;
                    let out = self.reduce(f, args)?;
                    self.push(out);
                }
                b'b' => {
                    // BUILD sets an object's attributes; the only one PyTorch pickles on plain
                    // data is a state dict's `_metadata` (per-module versions), which ember
                    // does not need.
                    self.pop("BUILD")?;
                    if !matches!(self.top("BUILD")?, Obj::Dict(_)) {
                        return Err("BUILD on something other than a dict".into());
                    }
                }
                other => {
                    return Err(format!(
                        "unsupported pickle opcode 0x{other:02x} at byte {at} (ember reads the pickles that torch.save \
                         writes for state dicts)"
                    ));
                }
            }
        }
    }

    fn memoize(&mut self, i: u32) -> Result<(), String> {
        let top = self.top("PUT")?.clone();
        self.memo.insert(i, top);
        Ok(())
    }

    fn recall(&mut self, i: u32) -> Result<(), String> {
        let v = self.memo.get(&i).cloned().ok_or_else(|| format!("GET of memo entry {i}, which was never set"))?;
        self.push(v);
        Ok(())
    }

    /// A storage named by a persistent id `('storage', class, key, location, numel)`.
    fn persistent(&mut self, pid: Obj, storage: &mut StorageReader<'_>) -> Result<Rc<Storage>, String> {
        let Obj::Tuple(t) = pid else {
            return Err(format!("a persistent id is a {}, not a tuple", pid.kind()));
        };
        let [Obj::Str(tag), Obj::Global(Global::Storage(kind)), Obj::Str(key), _location, Obj::Int(numel)] =
            t.as_slice()
        else {
            return Err("a persistent id is not ('storage', class, key, location, size)".into());
        };
        if &**tag != "storage" {
            return Err(format!("a persistent id of kind `{tag}`, not `storage`"));
        }
        if let Some(s) = self.storages.get(&**key) {
            return Ok(s.clone());
        }
        let bytes_needed = usize::try_from(*numel)
            .ok()
            .and_then(|n| n.checked_mul(kind.size()))
            .ok_or_else(|| format!("storage `{key}` declares {numel} elements"))?;
        self.spend(bytes_needed).map_err(|_| format!("storage `{key}` declares more bytes than the file holds"))?;
        let bytes = storage(key, bytes_needed)?;
        let s = Rc::new(Storage { kind: *kind, key: key.to_string(), bytes: Rc::new(bytes) });
        self.storages.insert(key.to_string(), s.clone());
        Ok(s)
    }

    fn spend(&mut self, n: usize) -> Result<(), ()> {
        self.budget = self.budget.checked_sub(n).ok_or(())?;
        Ok(())
    }

    fn reduce(&mut self, f: Obj, args: Obj) -> Result<Obj, String> {
        let Obj::Tuple(args) = args else {
            return Err(format!("REDUCE with {} arguments instead of a tuple", args.kind()));
        };
        match f {
            Obj::Global(Global::OrderedDict) if args.is_empty() => Ok(Obj::Dict(Rc::new(RefCell::new(Vec::new())))),
            Obj::Global(Global::RebuildTensor) => self.rebuild_tensor(&args).map(Obj::Tensor),
            Obj::Global(Global::RebuildParameter) => match args.first() {
                Some(Obj::Tensor(t)) => Ok(Obj::Tensor(t.clone())),
                _ => Err("_rebuild_parameter without a tensor".into()),
            },
            other => Err(format!("REDUCE calls a {} that ember does not call", other.kind())),
        }
    }

    /// `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])`.
    fn rebuild_tensor(&mut self, args: &[Obj]) -> Result<ember_tensor::Tensor, String> {
        let [Obj::Storage(storage), Obj::Int(offset), Obj::Tuple(size), Obj::Tuple(stride), ..] = args else {
            return Err("_rebuild_tensor_v2 needs (storage, offset, size, stride, ...)".into());
        };
        let name = &storage.key;
        let dims = |t: &[Obj], what: &str| -> Result<Vec<usize>, String> {
            t.iter()
                .map(|d| match d {
                    Obj::Int(v) => usize::try_from(*v).map_err(|_| format!("storage `{name}`: a {what} of {v}")),
                    other => Err(format!("storage `{name}`: a {what} that is a {}", other.kind())),
                })
                .collect()
        };
        let shape = dims(size, "size")?;
        let strides = dims(stride, "stride")?;
        if shape.len() != strides.len() {
            return Err(format!("storage `{name}`: {} sizes but {} strides", shape.len(), strides.len()));
        }
        let offset = usize::try_from(*offset).map_err(|_| format!("storage `{name}`: offset {offset}"))?;
        let numel = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| format!("storage `{name}`: size {shape:?} overflows"))?;
        let bytes =
            numel.checked_mul(storage.kind.size()).ok_or_else(|| format!("storage `{name}`: size {shape:?}"))?;
        self.spend(bytes)
            .map_err(|_| format!("storage `{name}`: a tensor of size {shape:?} is far larger than the file"))?;
        let available = storage.bytes.len() / storage.kind.size();
        let elements = if numel == 0 {
            Elements::Run { start: 0, len: 0 }
        } else {
            let last = shape
                .iter()
                .zip(&strides)
                .try_fold(offset, |a, (&d, &s)| a.checked_add((d - 1).checked_mul(s)?))
                .filter(|&last| last < available)
                .ok_or_else(|| {
                    format!(
                        "storage `{name}`: a view of size {shape:?}, stride {strides:?} and offset {offset} reaches past \
                         its {available} elements"
                    )
                })?;
            if contiguous(&shape, &strides) {
                Elements::Run { start: offset, len: last + 1 - offset }
            } else {
                Elements::At(strided_positions(&shape, &strides, offset, numel))
            }
        };
        storage.kind.gather(&storage.bytes, &elements, shape).map_err(|e| format!("storage `{name}`: {e}"))
    }
}

/// Whether `strides` are the row-major strides of `shape` (dimensions of extent 1 may have
/// any stride).
fn contiguous(shape: &[usize], strides: &[usize]) -> bool {
    let mut expected = 1usize;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d);
    }
    true
}

/// The storage positions of a strided view's elements in row-major order.
fn strided_positions(shape: &[usize], strides: &[usize], offset: usize, numel: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(numel);
    let mut index = vec![0usize; shape.len()];
    for _ in 0..numel {
        out.push(offset + index.iter().zip(strides).map(|(i, s)| i * s).sum::<usize>());
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// Adds key-value pairs (alternating in `items`) to a dict, replacing equal keys.
fn set_items(dict: &Rc<RefCell<Vec<(Obj, Obj)>>>, items: Vec<Obj>) -> Result<(), String> {
    if !items.len().is_multiple_of(2) {
        return Err("SETITEMS with an odd number of values".into());
    }
    let mut d = dict.borrow_mut();
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        match d.iter_mut().find(|(old, _)| same_key(old, &k)) {
            Some(entry) => entry.1 = v,
            None => d.push((k, v)),
        }
    }
    Ok(())
}

fn same_key(a: &Obj, b: &Obj) -> bool {
    match (a, b) {
        (Obj::Str(x), Obj::Str(y)) => x == y,
        (Obj::Int(x), Obj::Int(y)) => x == y,
        _ => false,
    }
}

/// The allowed global `module.name`.
fn global(module: &str, name: &str) -> Result<Global, String> {
    match (module, name) {
        ("collections", "OrderedDict") => Ok(Global::OrderedDict),
        ("torch._utils", "_rebuild_tensor_v2") => Ok(Global::RebuildTensor),
        ("torch._utils", "_rebuild_parameter") => Ok(Global::RebuildParameter),
        ("torch", class) if class.ends_with("Storage") => StorageKind::from_class(class).map(Global::Storage).ok_or_else(
            || format!("tensors stored as torch.{class}, which ember cannot hold (it reads float, double, half, bfloat16, integer and bool tensors)"),
        ),
        _ => Err(format!(
            "the pickle calls `{module}.{name}`, which ember does not run (it reads state dicts: tensors, numbers, strings, \
             lists, tuples and dicts, as torch.load(weights_only=True) does)"
        )),
    }
}

/// The plain value `obj` stands for; `nodes` counts the values built against `budget`.
fn to_value(obj: &Obj, depth: usize, nodes: &mut usize, budget: usize) -> Result<PtValue, String> {
    if depth > MAX_DEPTH {
        return Err(format!("values nested more than {MAX_DEPTH} deep (or a container that holds itself)"));
    }
    *nodes += 1;
    if *nodes > budget {
        return Err("the pickle builds far more values than its size allows".into());
    }
    let list = |items: &[Obj], nodes: &mut usize| -> Result<Vec<PtValue>, String> {
        items.iter().map(|o| to_value(o, depth + 1, nodes, budget)).collect()
    };
    Ok(match obj {
        Obj::None => PtValue::None,
        Obj::Bool(b) => PtValue::Bool(*b),
        Obj::Int(v) => PtValue::Int(*v),
        Obj::Float(v) => PtValue::Float(*v),
        Obj::Str(s) => PtValue::Str(s.to_string()),
        Obj::Tuple(t) => PtValue::Tuple(list(t, nodes)?),
        Obj::List(l) => PtValue::List(list(&l.borrow(), nodes)?),
        Obj::Dict(d) => PtValue::Dict(
            d.borrow()
                .iter()
                .map(|(k, v)| Ok((to_value(k, depth + 1, nodes, budget)?, to_value(v, depth + 1, nodes, budget)?)))
                .collect::<Result<_, String>>()?,
        ),
        Obj::Tensor(t) => PtValue::Tensor(t.clone()),
        Obj::Global(_) | Obj::Storage(_) => return Err(format!("a bare {} where data was expected", obj.kind())),
    })
}
