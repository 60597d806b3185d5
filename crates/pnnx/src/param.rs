//! The `.param` text: one operator per line with its blobs, parameters, weight
//! declarations and blob shapes.
//!
//! ```text
//! 7767517
//! <operator count> <blob count>
//! <type> <name> <#inputs> <#outputs> <input blobs..> <output blobs..> key=value.. @weight=(shape)f32.. $arg=blob.. #blob=(shape)f32..
//! ```

use std::collections::BTreeMap;

/// The first line of every `.param` file.
const MAGIC: &str = "7767517";

/// One operator of a PNNX graph.
#[derive(Clone, Debug)]
pub struct Operator {
    /// Its type: `nn.Linear`, `F.relu`, `pnnx.Expression`, ...
    pub kind: String,
    /// Its name (the module path for `nn.*` operators, whose weights are stored under it).
    pub name: String,
    /// The blobs it reads, in order.
    pub inputs: Vec<String>,
    /// The blobs it writes, in order.
    pub outputs: Vec<String>,
    /// `key=value` parameters, values as written (`(3,3)`, `True`, `1.000000e-05`, ...).
    pub params: BTreeMap<String, String>,
    /// `@name=(shape)dtype` weight declarations: the stored tensors' shapes.
    pub weights: BTreeMap<String, Vec<usize>>,
    /// The line it was read from (1-based), for error messages.
    pub line: usize,
}

impl Operator {
    /// A description for error messages: `nn.Linear `fc` (line 4)`.
    pub fn describe(&self) -> String {
        format!("{} `{}` (line {})", self.kind, self.name, self.line)
    }
}

/// Parses a `.param` file's text.
pub(crate) fn parse(text: &str) -> Result<Vec<Operator>, String> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty());
    match lines.next() {
        Some((_, MAGIC)) => {}
        Some((_, other)) => return Err(format!("line 1 is `{other}`, not the PNNX magic number {MAGIC}")),
        None => return Err("the file is empty".into()),
    }
    let (count_line, counts) = lines.next().ok_or("no operator and blob counts on line 2")?;
    let numbers: Vec<usize> = counts.split_whitespace().filter_map(|t| t.parse().ok()).collect();
    let [op_count, _blob_count] = numbers[..] else {
        return Err(format!("line {count_line}: `{counts}` is not `<operator count> <blob count>`"));
    };
    let ops = lines.map(|(n, l)| operator(n, l)).collect::<Result<Vec<_>, String>>()?;
    if ops.len() != op_count {
        return Err(format!("line {count_line} declares {op_count} operators but the file has {}", ops.len()));
    }
    Ok(ops)
}

fn operator(line: usize, text: &str) -> Result<Operator, String> {
    let mut tokens = text.split_whitespace();
    let mut next = |what: &str| tokens.next().ok_or_else(|| format!("line {line}: no {what}"));
    let kind = next("operator type")?.to_string();
    let name = next("operator name")?.to_string();
    let count =
        |t: &str, what: &str| t.parse::<usize>().map_err(|_| format!("line {line}: {what} `{t}` is not a count"));
    let n_in = count(next("input count")?, "input count")?;
    let n_out = count(next("output count")?, "output count")?;
    let rest: Vec<&str> = tokens.collect();
    if rest.len() < n_in + n_out {
        return Err(format!(
            "line {line}: {kind} `{name}` declares {n_in} inputs and {n_out} outputs but lists {}",
            rest.len()
        ));
    }
    let inputs = rest[..n_in].iter().map(|s| s.to_string()).collect();
    let outputs = rest[n_in..n_in + n_out].iter().map(|s| s.to_string()).collect();
    let mut op = Operator { kind, name, inputs, outputs, params: BTreeMap::new(), weights: BTreeMap::new(), line };
    for token in &rest[n_in + n_out..] {
        let (key, value) = token
            .split_once('=')
            .ok_or_else(|| format!("line {line}: `{token}` is not key=value in {}", op.describe()))?;
        if let Some(weight) = key.strip_prefix('@') {
            let shape = value
                .strip_prefix('(')
                .and_then(|v| v.split_once(')'))
                .map(|(dims, _dtype)| dims)
                .ok_or_else(|| format!("line {line}: weight `{weight}` has no (shape)"))?;
            let dims = shape
                .split(',')
                .filter(|d| !d.is_empty())
                .map(|d| d.parse::<usize>().map_err(|_| format!("line {line}: weight `{weight}` has shape ({shape})")))
                .collect::<Result<Vec<_>, String>>()?;
            op.weights.insert(weight.to_string(), dims);
        } else if key.starts_with('#') || key.starts_with('$') {
            // Blob shapes and argument names: informative only.
        } else {
            op.params.insert(key.to_string(), value.to_string());
        }
    }
    Ok(op)
}
