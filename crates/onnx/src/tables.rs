//! The operator tables of the repository's `docs/interop.md`, rendered from the importer's
//! and the exporter's own lists so that the documentation cannot drift from the code (a
//! test compares them and prints the text to paste).

/// The Markdown table of the operators [`load`](crate::load) reads: one row per operator
/// with the attributes it accepts (any other is refused, naming the node) and what it
/// supports.
pub fn import_table() -> String {
    let mut out = String::from("| operator | attributes | notes |\n|---|---|---|\n");
    for spec in crate::ops::OPS {
        let attrs: Vec<String> = spec.attrs.iter().map(|a| format!("`{a}`")).collect();
        out.push_str(&format!("| `{}` | {} | {} |\n", spec.name, attrs.join(", "), spec.note));
    }
    out
}

/// The Markdown table of the recorded operations [`export`](crate::export()) writes, and
/// the ONNX operators each becomes.
pub fn export_table() -> String {
    let mut out = String::from("| ember operation | ONNX |\n|---|---|\n");
    for (kinds, onnx) in crate::export::EXPORTS {
        let kinds: Vec<String> = kinds.iter().map(|k| format!("`{k}`")).collect();
        out.push_str(&format!("| {} | {onnx} |\n", kinds.join(", ")));
    }
    out
}
