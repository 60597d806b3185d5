//! The layering of ember, read from the sources: the tests fail when an import breaks it.
//!
//! Inside `ember-tensor` every file belongs to a layer, and imports point down only (paths
//! under `crates/tensor/src`, from the bottom):
//!
//! 1. core: `error.rs`, `shape.rs`, `layout.rs`, `dtype.rs` and `dtype/`, `device.rs`,
//!    `random.rs`, `threading.rs`, `storage/`, `host/`;
//! 2. op descriptors: `ops/`;
//! 3. the `Backend` trait: the rest of `backend/` (the method list, the trait, its operands,
//!    `compose/`, `validate/`, `delegate.rs`);
//! 4. the backends, leaves: `backend/cpu/`, `backend/cuda/`, `backend/emulated_cuda.rs`,
//!    `backend/libtorch/`;
//! 5. the registry: `backend/registry.rs`;
//! 6. the `Tensor` API: `tensor/`, `display.rs`;
//! 7. facades, [`FACADES`]: files of module lines and re-exports only.
//!
//! An import is a `use` of `crate::..`, `super::..`, `self::..` or a name the module has in
//! scope, an inline path starting with `crate::`, `$crate::`, `super::` or `self::` (also
//! inside macro definitions and invocations) or with a name a `use` bound; each is resolved
//! through `pub use` re-exports to the file that defines the item (a name the sources do not
//! show, one a macro defines, to the file of the module where the search ends). `mod` lines
//! are not imports, and neither is a parent's plain path to its own child (`unary::map`).
//! Code under `#[cfg(test)]` is left out: unit tests may use the whole crate, as the
//! integration tests do.
//!
//! The rules:
//! - no file imports from a higher layer;
//! - no import circle between files;
//! - the backends import nothing from one another, and nothing outside them imports from
//!   them, nor spells a path through them, except the registry;
//! - only `storage/` and a backend's own files name a variant of `Storage`, anywhere under
//!   `crates/`: its `Cpu` variant only `storage/` and `backend/cpu/`, its `Cuda` variant
//!   only `storage/` and the CUDA backends (real and emulated), its `Torch` variant only
//!   `storage/` and `backend/libtorch/`;
//! - the other crates (src, tests, examples, benches) never name `ember_tensor::backend`, in
//!   any spelling (`ember_tensor::backend`, `ember::tensor::backend`, `tensor::backend`
//!   after `use ember::tensor`, aliases, nested `use` groups, inline paths): op descriptors
//!   come from `ember_tensor::ops` or the crate root. The module stays public for backends
//!   written outside ember.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};

/// The crates that sit above `ember-tensor`, which must reach it through its public API.
const UPPER_CRATES: &[&str] = &[
    "autograd",
    "io",
    "nn",
    "optim",
    "data",
    "onnx",
    "pnnx",
    "distributed",
    "models",
    "fuzz",
    "ember",
    "testing",
    "derive",
];

// ---------------------------------------------------------------------------------------
// What a file names
// ---------------------------------------------------------------------------------------

/// How a path appears in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// In a `use` declaration (fully expanded from its groups).
    Use,
    /// In code: an expression, a type, a pattern, an attribute.
    Inline,
    /// In the tokens of a macro definition or invocation.
    Macro,
}

/// A path a file names, as written (`crate`, `$crate`, `super` and `self` included), the
/// inline module it is written in (relative to the file's module) and whether it is test
/// code.
#[derive(Clone, Debug)]
struct Named {
    segs: Vec<String>,
    kind: Kind,
    module: Vec<String>,
    test: bool,
}

/// A module as one file (or an inline block of it) declares it.
#[derive(Clone, Debug, Default)]
struct ModInfo {
    /// Names of the items defined here (types, functions, constants, traits, ...).
    items: BTreeSet<String>,
    /// Names bound by `use`, with the path they stand for.
    imports: BTreeMap<String, Vec<String>>,
    /// The paths of `use ..::*`.
    globs: Vec<Vec<String>>,
    /// `mod x;` declarations: the name and its `#[path]`, if any.
    declared: Vec<(String, Option<String>)>,
    /// Inline `mod x { .. }` blocks.
    inline: BTreeSet<String>,
    /// Under `#[cfg(test)]`.
    test: bool,
}

/// Everything one file declares and names.
#[derive(Debug, Default)]
struct FileInfo {
    /// Its modules, keyed by their path relative to the file's module (`[]` for the file).
    modules: BTreeMap<Vec<String>, ModInfo>,
    /// `#[macro_export]` macros, which live at the crate root.
    exported_macros: BTreeSet<String>,
    named: Vec<Named>,
}

/// Whether `attrs` put an item under `#[cfg(test)]` (a `cfg` naming `test` and not `not`).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| match &a.meta {
        syn::Meta::List(l) if l.path.is_ident("cfg") => {
            let text = l.tokens.to_string();
            let words: Vec<&str> = text.split(|c: char| !c.is_alphanumeric() && c != '_').collect();
            words.contains(&"test") && !words.contains(&"not")
        }
        _ => false,
    })
}

/// The `#[path = ".."]` of a `mod` item.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The paths a `use` tree stands for, each with the name it binds (`None` for a glob).
fn flatten_use(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                // `use a::b::{self}` binds `b`.
                let bound = prefix.last().cloned();
                out.push((prefix.clone(), bound));
            } else {
                let mut p = prefix.clone();
                p.push(name.clone());
                out.push((p, Some(name)));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut p = prefix.clone();
            let name = r.ident.to_string();
            if name != "self" {
                p.push(name);
            }
            out.push((p, Some(r.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), None)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
    }
}

/// The paths in a token stream: `a::b::c` runs of identifiers (a leading `$crate` kept as
/// one segment, a leading `::` dropped), in macro definitions and invocations alike.
fn token_paths(tokens: proc_macro2::TokenStream, out: &mut Vec<Vec<String>>) {
    use proc_macro2::TokenTree;
    let tts: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    let is_colon2 = |i: usize| {
        matches!((tts.get(i), tts.get(i + 1)), (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && b.as_char() == ':' && a.spacing() == proc_macro2::Spacing::Joint)
    };
    while i < tts.len() {
        let start = match &tts[i] {
            TokenTree::Group(g) => {
                token_paths(g.stream(), out);
                i += 1;
                continue;
            }
            TokenTree::Punct(p) if p.as_char() == '$' => match tts.get(i + 1) {
                Some(TokenTree::Ident(id)) if id == "crate" => Some(("$crate".to_string(), i + 2)),
                _ => None,
            },
            TokenTree::Ident(id) => {
                // Not the tail of a longer path (`x::y` after `::` was taken with its head).
                Some((id.to_string(), i + 1))
            }
            _ => None,
        };
        let Some((head, mut j)) = start else {
            i += 1;
            continue;
        };
        let mut segs = vec![head];
        while is_colon2(j) {
            match tts.get(j + 2) {
                Some(TokenTree::Ident(id)) => {
                    segs.push(id.to_string());
                    j += 3;
                }
                _ => break,
            }
        }
        if segs.len() > 1 {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
}

/// Walks a file, keeping the inline module and the test flag it is in.
struct Collector {
    info: FileInfo,
    module: Vec<String>,
    test: bool,
}

impl Collector {
    fn current(&mut self) -> &mut ModInfo {
        self.info.modules.entry(self.module.clone()).or_default()
    }

    fn name(&mut self, segs: Vec<String>, kind: Kind) {
        let named = Named { segs, kind, module: self.module.clone(), test: self.test };
        self.info.named.push(named);
    }

    fn item(&mut self, ident: &syn::Ident) {
        self.current().items.insert(ident.to_string());
    }

    /// Runs `f` with the test flag raised when `attrs` say `#[cfg(test)]`.
    fn scoped(&mut self, attrs: &[syn::Attribute], f: impl FnOnce(&mut Self)) {
        let was = self.test;
        self.test |= is_test(attrs);
        f(self);
        self.test = was;
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match i {
            syn::Item::Const(x) => &x.attrs,
            syn::Item::Enum(x) => &x.attrs,
            syn::Item::Fn(x) => &x.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Macro(x) => &x.attrs,
            syn::Item::Mod(x) => &x.attrs,
            syn::Item::Static(x) => &x.attrs,
            syn::Item::Struct(x) => &x.attrs,
            syn::Item::Trait(x) => &x.attrs,
            syn::Item::Type(x) => &x.attrs,
            syn::Item::Union(x) => &x.attrs,
            syn::Item::Use(x) => &x.attrs,
            _ => &[],
        };
        self.scoped(attrs, |c| {
            match i {
                syn::Item::Const(x) => c.item(&x.ident),
                syn::Item::Enum(x) => c.item(&x.ident),
                syn::Item::Fn(x) => c.item(&x.sig.ident),
                syn::Item::Static(x) => c.item(&x.ident),
                syn::Item::Struct(x) => c.item(&x.ident),
                syn::Item::Trait(x) => c.item(&x.ident),
                syn::Item::Type(x) => c.item(&x.ident),
                syn::Item::Union(x) => c.item(&x.ident),
                syn::Item::Macro(x) => {
                    if let Some(ident) = &x.ident
                        && x.attrs.iter().any(|a| a.path().is_ident("macro_export"))
                    {
                        c.info.exported_macros.insert(ident.to_string());
                    }
                }
                _ => {}
            }
            visit::visit_item(c, i);
        });
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let name = m.ident.to_string();
        match &m.content {
            None => {
                let path = path_attr(&m.attrs);
                self.current().declared.push((name, path));
            }
            Some((_, items)) => {
                self.current().inline.insert(name.clone());
                self.module.push(name);
                let test = self.test;
                self.current().test = test;
                for it in items {
                    self.visit_item(it);
                }
                self.module.pop();
            }
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut out = Vec::new();
        flatten_use(&u.tree, &mut Vec::new(), &mut out);
        for (path, bound) in out {
            match bound {
                Some(name) if name != "_" => {
                    self.current().imports.insert(name, path.clone());
                }
                Some(_) => {}
                None => self.current().globs.push(path.clone()),
            }
            self.name(path, Kind::Use);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let mut segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if p.leading_colon.is_some() {
            segs.insert(0, String::new());
        }
        if segs.len() > 1 {
            self.name(segs, Kind::Inline);
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let mut paths = Vec::new();
        token_paths(m.tokens.clone(), &mut paths);
        for p in paths {
            self.name(p, Kind::Macro);
        }
        visit::visit_macro(self, m);
    }
}

/// Parses a file's source.
fn collect(src: &str) -> Result<FileInfo, String> {
    let file = syn::parse_file(src).map_err(|e| e.to_string())?;
    let mut c = Collector { info: FileInfo::default(), module: Vec::new(), test: false };
    c.current();
    c.visit_file(&file);
    Ok(c.info)
}

// ---------------------------------------------------------------------------------------
// A crate's modules and the file-level import graph
// ---------------------------------------------------------------------------------------

/// One module of the crate.
#[derive(Debug)]
struct Module {
    file: String,
    info: ModInfo,
    children: BTreeSet<String>,
}

/// A crate's module tree, built from `lib.rs` by following `mod` declarations.
struct Crate {
    /// Modules by absolute path (`[]` is the crate root).
    modules: BTreeMap<Vec<String>, Module>,
    /// The paths each file names, with the module (absolute) they are written in.
    named: BTreeMap<String, Vec<(Named, Vec<String>)>>,
    /// Root-level macros (`#[macro_export]`) and the file defining each.
    macros: BTreeMap<String, String>,
}

/// Where a path leads: the file defining it, every module it passed through, and whether
/// the name was found (`false` when the search ended in a module that does not show it).
#[derive(Debug, Clone)]
struct Resolved {
    file: String,
    via: Vec<Vec<String>>,
    found: bool,
}

impl Crate {
    /// The crate whose sources `read` returns by path relative to `src/` (`lib.rs` first).
    fn build(read: &dyn Fn(&str) -> Option<String>) -> Result<Crate, String> {
        let mut krate = Crate { modules: BTreeMap::new(), named: BTreeMap::new(), macros: BTreeMap::new() };
        let mut queue = vec![(Vec::<String>::new(), "lib.rs".to_string())];
        while let Some((base, file)) = queue.pop() {
            let src = read(&file).ok_or_else(|| format!("cannot read {file}"))?;
            let info = collect(&src).map_err(|e| format!("{file}: {e}"))?;
            for m in &info.exported_macros {
                krate.macros.insert(m.clone(), file.clone());
            }
            let named = info
                .named
                .iter()
                .map(|n| {
                    let mut abs = base.clone();
                    abs.extend(n.module.iter().cloned());
                    (n.clone(), abs)
                })
                .collect();
            krate.named.insert(file.clone(), named);
            for (rel, m) in info.modules {
                let mut abs = base.clone();
                abs.extend(rel.iter().cloned());
                for (child, path) in &m.declared {
                    let child_file = child_file(&file, &rel, child, path.as_deref(), read);
                    let child_file = child_file.ok_or_else(|| format!("{file}: no file for `mod {child};`"))?;
                    let mut child_abs = abs.clone();
                    child_abs.push(child.clone());
                    queue.push((child_abs, child_file));
                }
                let mut children: BTreeSet<String> = m.declared.iter().map(|(c, _)| c.clone()).collect();
                children.extend(m.inline.iter().cloned());
                let entry = krate.modules.entry(abs).or_insert(Module {
                    file: file.clone(),
                    info: ModInfo::default(),
                    children: BTreeSet::new(),
                });
                // A module declared twice (under exclusive `cfg`s) gets both files' names.
                entry.info.items.extend(m.items);
                entry.info.imports.extend(m.imports);
                entry.info.globs.extend(m.globs);
                entry.info.test |= m.test;
                entry.children.extend(children);
            }
        }
        Ok(krate)
    }

    /// Resolves `segs`, written in module `from`, to the file that defines what it names;
    /// `None` for a path into another crate. `bare` allows a first segment that is not
    /// `crate`, `$crate`, `super` or `self` (a name the module has in scope).
    fn resolve(&self, from: &[String], segs: &[String], bare: bool) -> Option<Resolved> {
        self.resolve_depth(from, segs, bare, 0)
    }

    fn resolve_depth(&self, from: &[String], segs: &[String], bare: bool, depth: usize) -> Option<Resolved> {
        if depth > 16 || segs.is_empty() {
            return None;
        }
        let mut cur: Vec<String>;
        let mut rest = segs;
        match segs[0].as_str() {
            "crate" | "$crate" => {
                cur = Vec::new();
                rest = &segs[1..];
            }
            "self" => {
                cur = from.to_vec();
                rest = &segs[1..];
            }
            "super" => {
                cur = from.to_vec();
                while rest.first().map(String::as_str) == Some("super") {
                    cur.pop();
                    rest = &rest[1..];
                }
            }
            _ if !bare => return None,
            first => {
                let m = self.modules.get(from)?;
                if m.children.contains(first) {
                    cur = from.to_vec();
                } else if let Some(target) = m.info.imports.get(first) {
                    let mut p = target.clone();
                    p.extend(segs[1..].iter().cloned());
                    return self.resolve_depth(from, &p, true, depth + 1);
                } else if m.info.items.contains(first) {
                    return Some(Resolved { file: m.file.clone(), via: vec![from.to_vec()], found: true });
                } else if from.is_empty() && self.macros.contains_key(first) {
                    return Some(Resolved { file: self.macros[first].clone(), via: vec![Vec::new()], found: true });
                } else {
                    return None;
                }
            }
        }
        let mut via = vec![cur.clone()];
        for (i, seg) in rest.iter().enumerate() {
            let m = self.modules.get(&cur)?;
            if m.children.contains(seg) {
                cur.push(seg.clone());
                via.push(cur.clone());
                continue;
            }
            if m.info.items.contains(seg) {
                return Some(Resolved { file: m.file.clone(), via, found: true });
            }
            if cur.is_empty()
                && let Some(file) = self.macros.get(seg)
            {
                return Some(Resolved { file: file.clone(), via, found: true });
            }
            if let Some(target) = m.info.imports.get(seg) {
                let mut p = target.clone();
                p.extend(rest[i + 1..].iter().cloned());
                let mut r = self.resolve_depth(&cur, &p, true, depth + 1)?;
                via.append(&mut r.via);
                r.via = via;
                return Some(r);
            }
            for g in &m.info.globs {
                let mut p = g.clone();
                p.extend(rest[i..].iter().cloned());
                if let Some(mut r) = self.resolve_depth(&cur, &p, true, depth + 1).filter(|r| r.found) {
                    let mut all = via.clone();
                    all.append(&mut r.via);
                    r.via = all;
                    return Some(r);
                }
            }
            // A name the sources do not show (one a macro defines): the module where the
            // search ends.
            return Some(Resolved { file: m.file.clone(), via, found: false });
        }
        let m = self.modules.get(&cur)?;
        Some(Resolved { file: m.file.clone(), via, found: true })
    }

    /// The imports of every file's non-test code: `(from, to, the path as written)`.
    fn edges(&self) -> Vec<(String, Resolved, String)> {
        let mut out = Vec::new();
        for (file, named) in &self.named {
            for (n, module) in named {
                if n.test || self.modules.get(module).is_some_and(|m| m.info.test) {
                    continue;
                }
                let rooted = matches!(n.segs[0].as_str(), "crate" | "$crate" | "super" | "self");
                let bare = match n.kind {
                    Kind::Use => true,
                    // In code, a name a `use` bound (not a child module by its plain name).
                    Kind::Inline | Kind::Macro => {
                        rooted || self.modules.get(module).is_some_and(|m| m.info.imports.contains_key(&n.segs[0]))
                    }
                };
                if !rooted && !bare {
                    continue;
                }
                if let Some(r) = self.resolve(module, &n.segs, bare) {
                    out.push((file.clone(), r, n.segs.join("::")));
                }
            }
        }
        out
    }
}

/// The file of `mod child;` declared in `file`, inside its inline modules `inline`.
fn child_file(
    file: &str,
    inline: &[String],
    child: &str,
    path: Option<&str>,
    read: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    let p = Path::new(file);
    let dir = p.parent().unwrap_or(Path::new(""));
    let stem = p.file_stem()?.to_str()?;
    let owns_dir = matches!(stem, "mod" | "lib");
    if let Some(path) = path {
        let f = dir.join(path).to_str()?.to_string();
        return read(&f).map(|_| f);
    }
    let mut base: PathBuf = if owns_dir { dir.to_path_buf() } else { dir.join(stem) };
    for m in inline {
        base.push(m);
    }
    let a = base.join(format!("{child}.rs")).to_str()?.to_string();
    let b = base.join(child).join("mod.rs").to_str()?.to_string();
    [a, b].into_iter().find(|f| read(f).is_some())
}

/// The files that only declare modules and re-export their items (`crate::backend::Backend`
/// for `crate::backend::methods::Backend`): what they re-export is not an import of theirs
/// for the order of layers, and nothing may import them as a whole.
const FACADES: &[&str] = &["lib.rs", "backend/mod.rs"];

/// The layer of an `ember-tensor` file (by path under `src/`): higher layers may import
/// lower ones.
fn layer(file: &str) -> (u8, &'static str) {
    let f = file;
    if FACADES.contains(&f) {
        (6, "facade")
    } else if f.starts_with("tensor/") || f == "display.rs" {
        (5, "Tensor API")
    } else if f == "backend/registry.rs" {
        (4, "registry")
    } else if leaf(f).is_some() {
        (3, "backends")
    } else if f.starts_with("backend/") {
        (2, "Backend trait")
    } else if f.starts_with("ops/") {
        (1, "op descriptors")
    } else {
        (0, "core")
    }
}

/// The backend a file belongs to, if it is one of theirs.
fn leaf(file: &str) -> Option<&'static str> {
    if file.starts_with("backend/cpu/") {
        Some("cpu")
    } else if file.starts_with("backend/cuda/") {
        Some("cuda")
    } else if file == "backend/emulated_cuda.rs" {
        Some("emulated_cuda")
    } else if file.starts_with("backend/libtorch/") {
        Some("libtorch")
    } else {
        None
    }
}

/// The backend a module path belongs to, if any.
fn leaf_module(m: &[String]) -> Option<&'static str> {
    match m {
        [b, x, ..] if b == "backend" => match x.as_str() {
            "cpu" => Some("cpu"),
            "cuda" => Some("cuda"),
            "emulated_cuda" => Some("emulated_cuda"),
            "libtorch" => Some("libtorch"),
            _ => None,
        },
        _ => None,
    }
}

/// Every breach of the layering inside a crate laid out like `ember-tensor`, one line each.
fn layering_violations(krate: &Crate) -> Vec<String> {
    let mut out = Vec::new();
    let edges = krate.edges();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, r, spelled) in &edges {
        let to = &r.file;
        if from != to {
            graph.entry(from.clone()).or_default().insert(to.clone());
        }
        let (lf, nf) = layer(from);
        let (lt, nt) = layer(to);
        if lt > lf {
            out.push(format!("{from} ({nf}) imports {to} ({nt}), a higher layer: `{spelled}`"));
        }
        let own = leaf(from);
        let allowed = |l: &'static str| own == Some(l) || from == "backend/registry.rs";
        if let Some(l) = leaf(to) {
            if !allowed(l) {
                out.push(format!("{from} imports {to}, a file of the {l} backend: `{spelled}`"));
            }
        } else if let Some(l) = r.via.iter().find_map(|m| leaf_module(m))
            && !allowed(l)
        {
            out.push(format!("{from} reaches {to} through the {l} backend: `{spelled}`"));
        }
    }
    for cycle in cycles(&graph) {
        out.push(format!("import circle: {}", cycle.join(" -> ")));
    }
    out.sort();
    out.dedup();
    out
}

/// The strongly connected components of more than one file, each as a circle through them.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative.
    let nodes: Vec<&String> = {
        let mut n: BTreeSet<&String> = graph.keys().collect();
        n.extend(graph.values().flatten());
        n.into_iter().collect()
    };
    let idx: BTreeMap<&String, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let succ: Vec<Vec<usize>> =
        nodes.iter().map(|n| graph.get(*n).map(|s| s.iter().map(|t| idx[t]).collect()).unwrap_or_default()).collect();
    let n = nodes.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut next, mut sccs) = (Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut k)) = work.last_mut() {
            if *k == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&w) = succ[v].get(*k) {
                *k += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(u, _)) = work.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] == index[v] {
                let mut scc = Vec::new();
                while let Some(w) = stack.pop() {
                    on[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    sccs.push(scc);
                }
            }
        }
    }
    sccs.into_iter()
        .map(|scc| {
            // A circle through the component: follow edges inside it from its first file.
            let inside: BTreeSet<usize> = scc.iter().copied().collect();
            let start = *scc.iter().min().unwrap_or(&0);
            let mut path = vec![start];
            let mut seen = BTreeSet::from([start]);
            let mut v = start;
            while let Some(&w) = succ[v].iter().find(|w| inside.contains(w) && (!seen.contains(w) || **w == start)) {
                path.push(w);
                if w == start {
                    break;
                }
                seen.insert(w);
                v = w;
            }
            path.into_iter().map(|i| nodes[i].clone()).collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The other crates' view of `ember_tensor::backend`
// ---------------------------------------------------------------------------------------

/// `segs` with its first segment replaced by the path a `use` bound it to, repeatedly
/// (`tensor::backend` after `use ember::tensor` is `ember::tensor::backend`).
fn expand_aliases(aliases: &BTreeMap<String, Vec<String>>, segs: &[String]) -> Vec<String> {
    let mut segs = segs.to_vec();
    // A bound on the chain of aliases, in case two `use`s name each other.
    for _ in 0..8 {
        let Some(a) = segs.first().and_then(|f| aliases.get(f)) else { break };
        let mut p = a.clone();
        p.extend(segs[1..].iter().cloned());
        if p == segs {
            break;
        }
        segs = p;
    }
    segs
}

/// Every path in `src` that reaches into `ember_tensor::backend`,
/// one line each. `facade` marks the `ember` crate's own sources, where `crate::tensor` is
/// `ember_tensor`.
fn backend_reaches(src: &str, facade: bool) -> Result<Vec<String>, String> {
    let info = collect(src)?;
    // Every name a `use` binds, anywhere in the file, with the path it stands for.
    let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in info.modules.values() {
        for (name, path) in &m.imports {
            aliases.insert(name.clone(), path.clone());
        }
    }
    let expand = |segs: &[String]| expand_aliases(&aliases, segs);
    let mut out = Vec::new();
    for n in &info.named {
        let segs: Vec<String> = n.segs.iter().filter(|s| !s.is_empty()).cloned().collect();
        let segs = expand(&segs);
        let tail = match segs.as_slice() {
            [e, rest @ ..] if e == "ember_tensor" => rest,
            [e, t, rest @ ..] if e == "ember" && t == "tensor" => rest,
            [c, t, rest @ ..] if facade && c == "crate" && t == "tensor" => rest,
            _ => continue,
        };
        if tail.first().map(String::as_str) == Some("backend") {
            out.push(n.segs.join("::"));
        }
    }
    // A `use` that binds a name to `backend` (or to the crate, then used as `x::backend`)
    // shows up again in the inline paths it expands; one line per spelling is enough.
    out.sort();
    out.dedup();
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Reading the workspace
// ---------------------------------------------------------------------------------------

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn tensor_crate() -> Crate {
    let src = workspace().join("crates/tensor/src");
    Crate::build(&|f: &str| std::fs::read_to_string(src.join(f)).ok()).expect("ember-tensor parses")
}

// ---------------------------------------------------------------------------------------
// The tests on the workspace
// ---------------------------------------------------------------------------------------

#[test]
fn ember_tensor_imports_point_down_only() {
    let krate = tensor_crate();
    assert!(krate.modules.len() > 50, "found only {} modules", krate.modules.len());
    let v = layering_violations(&krate);
    assert!(v.is_empty(), "ember-tensor's layering is broken:\n{}", v.join("\n"));
}

#[test]
fn other_crates_never_name_the_backend_module() {
    let root = workspace().join("crates");
    let mut files = Vec::new();
    for c in UPPER_CRATES {
        rust_files(&root.join(c), &mut files);
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut bad = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).expect("readable source");
        let facade = f.starts_with(root.join("ember/src"));
        match backend_reaches(&src, facade) {
            Ok(v) => bad.extend(v.into_iter().map(|p| format!("{}: {p}", f.display()))),
            Err(e) => bad.push(format!("{}: does not parse: {e}", f.display())),
        }
    }
    assert!(bad.is_empty(), "outside ember-tensor, nothing names `ember_tensor::backend`:\n{}", bad.join("\n"));
}

#[test]
fn only_storage_and_its_backend_name_a_storage_variant() {
    let root = workspace().join("crates");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let tensor = root.join("tensor/src");
    let mut bad = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&tensor).ok().and_then(|p| p.to_str()).unwrap_or("");
        let src = std::fs::read_to_string(f).expect("readable source");
        let storage = rel.starts_with("storage/");
        // Spelled in two pieces, so that this file does not name the variants itself.
        for (name, owner) in [("Cpu", "cpu"), ("Cuda", "cuda"), ("Torch", "libtorch")] {
            let variant = &format!("Storage::{name}");
            let allowed = storage
                || match owner {
                    "cpu" => leaf(rel) == Some("cpu"),
                    "libtorch" => leaf(rel) == Some("libtorch"),
                    _ => matches!(leaf(rel), Some("cuda" | "emulated_cuda")),
                };
            // A word boundary on both sides keeps `CpuStorage::` and
            // `DeviceStorage::new` apart.
            let hits = src.match_indices(variant).filter(|(i, _)| {
                !src[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                    && !src[i + variant.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            });
            if !allowed && hits.count() > 0 {
                bad.push(format!("{} names `{variant}`", f.display()));
            }
        }
    }
    assert!(bad.is_empty(), "a `Storage` variant named outside storage/ and its backend:\n{}", bad.join("\n"));
}

// ---------------------------------------------------------------------------------------
// The checker itself, on small sources
// ---------------------------------------------------------------------------------------

/// A crate from `(path under src/, source)` pairs.
fn toy(files: &[(&str, &str)]) -> Crate {
    let map: BTreeMap<String, String> = files.iter().map(|(p, s)| (p.to_string(), s.to_string())).collect();
    Crate::build(&|f: &str| map.get(f).cloned()).expect("the toy crate parses")
}

/// A toy crate with ember-tensor's layout; `extra` replaces or adds files.
fn toy_tensor(extra: &[(&str, &str)]) -> Crate {
    let mut files: BTreeMap<&str, &str> = [
        ("lib.rs", "pub mod backend; pub mod ops; pub mod shape; mod tensor; pub use tensor::Tensor;"),
        ("shape.rs", "pub struct Shape;"),
        ("ops/mod.rs", "pub mod conv; pub use conv::ConvArgs;"),
        ("ops/conv.rs", "use crate::shape::Shape; pub struct ConvArgs;"),
        (
            "backend/mod.rs",
            "mod methods; pub mod cpu; mod registry; pub use methods::Backend; pub use registry::backend_for;",
        ),
        ("backend/methods.rs", "use crate::ops::conv::ConvArgs; pub trait Backend {}"),
        ("backend/cpu/mod.rs", "mod kernels; use crate::backend::Backend; pub struct CpuBackend;"),
        ("backend/cpu/kernels.rs", "use super::super::Backend; pub fn k() {}"),
        ("backend/registry.rs", "use super::cpu::CpuBackend; pub fn backend_for() {}"),
        ("tensor/mod.rs", "use crate::backend::backend_for; use crate::ops::ConvArgs; pub struct Tensor;"),
    ]
    .into_iter()
    .collect();
    for (p, s) in extra {
        files.insert(p, s);
    }
    let files: Vec<(&str, &str)> = files.into_iter().collect();
    toy(&files)
}

#[test]
fn checker_accepts_a_well_layered_crate() {
    assert_eq!(layering_violations(&toy_tensor(&[])), Vec::<String>::new());
}

#[test]
fn checker_reports_an_import_circle_with_its_files() {
    let k = toy(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::B; pub struct A;"),
        ("b.rs", "pub struct B; fn f() { let _ = crate::c::C; }"),
        ("c.rs", "pub struct C; pub use self::inner::*; mod inner { pub use super::super::a::A as Z; }"),
    ]);
    let v = layering_violations(&k);
    assert!(
        v.iter().any(|l| l.starts_with("import circle:") && ["a.rs", "b.rs", "c.rs"].iter().all(|f| l.contains(f))),
        "{v:?}"
    );
}

#[test]
fn checker_resolves_re_exports_to_the_defining_file() {
    let k = toy(&[
        ("lib.rs", "pub mod a; mod b; mod c; pub use a::deep::Thing;"),
        ("a/mod.rs", "pub mod deep; pub mod made; pub mod names;"),
        ("a/deep.rs", "pub struct Thing;"),
        // A name a macro defines, in a module that also glob-imports others.
        ("a/made.rs", "use super::names::*; make_it!(Made);"),
        ("a/names.rs", "pub struct Other;"),
        ("b.rs", "use crate::Thing; use super::a; fn f() { let _ = a::deep::Thing; }"),
        ("c.rs", "use crate::a::made::Made; use crate::a::made::Other;"),
    ]);
    let edges: Vec<(String, String)> = k.edges().into_iter().map(|(f, r, _)| (f, r.file)).collect();
    assert!(edges.contains(&("b.rs".into(), "a/deep.rs".into())), "{edges:?}");
    assert!(!edges.iter().any(|(f, t)| f == "b.rs" && t == "lib.rs"), "{edges:?}");
    assert!(edges.contains(&("c.rs".into(), "a/made.rs".into())), "{edges:?}");
    assert!(edges.contains(&("c.rs".into(), "a/names.rs".into())), "{edges:?}");
}

#[test]
fn checker_reports_imports_from_a_higher_layer() {
    // Core importing the Tensor API, in a `use`, inline and inside a macro.
    for shape in [
        "use crate::tensor::Tensor; pub struct Shape;",
        "pub struct Shape; fn f() -> usize { std::mem::size_of::<crate::Tensor>() }",
        "pub struct Shape; macro_rules! m { () => { $crate::Tensor }; }",
    ] {
        let v = layering_violations(&toy_tensor(&[("shape.rs", shape)]));
        assert!(v.iter().any(|l| l.contains("shape.rs (core) imports tensor/mod.rs (Tensor API)")), "{shape}: {v:?}");
    }
    // Test code may, and a test module does not hide the rest of its file.
    let test_only = "pub struct Shape; #[cfg(test)] mod tests { use crate::Tensor; }";
    assert_eq!(layering_violations(&toy_tensor(&[("shape.rs", test_only)])), Vec::<String>::new());
    let beside_tests = "use crate::Tensor; pub struct Shape; #[cfg(test)] mod tests { use super::*; }";
    let v = layering_violations(&toy_tensor(&[("shape.rs", beside_tests)]));
    assert!(v.iter().any(|l| l.contains("shape.rs (core) imports tensor/mod.rs")), "{v:?}");
}

#[test]
fn checker_keeps_the_backends_apart() {
    let cuda = [
        ("backend/mod.rs", "mod methods; pub mod cpu; pub mod cuda; mod registry; pub use methods::Backend;"),
        ("backend/cuda/mod.rs", "use crate::backend::cpu::CpuBackend; pub struct CudaBackend;"),
    ];
    let v = layering_violations(&toy_tensor(&cuda));
    assert!(v.iter().any(|l| l.contains("backend/cuda/mod.rs imports backend/cpu/mod.rs")), "{v:?}");
    // Above the backends, only the registry names one, even through a re-export.
    let laundered = [
        ("backend/cpu/mod.rs", "mod kernels; pub(crate) use crate::shape::Shape as Grain; pub struct CpuBackend;"),
        ("tensor/mod.rs", "pub struct Tensor; fn f() { let _ = crate::backend::cpu::Grain; }"),
    ];
    let v = layering_violations(&toy_tensor(&laundered));
    assert!(v.iter().any(|l| l.contains("tensor/mod.rs reaches shape.rs through the cpu backend")), "{v:?}");
    let direct = [("tensor/mod.rs", "use crate::backend::cpu::CpuBackend; pub struct Tensor;")];
    let v = layering_violations(&toy_tensor(&direct));
    assert!(v.iter().any(|l| l.contains("tensor/mod.rs imports backend/cpu/mod.rs")), "{v:?}");
}

#[test]
fn checker_catches_every_spelling_of_the_backend_module() {
    let caught = [
        "use ember_tensor::backend::cpu::CpuBackend;",
        "use ember_tensor::backend;",
        "use ember_tensor::backend::*;",
        "use ember::tensor::backend::ConvGeometry;",
        "use ember::tensor; fn f() { let _ = tensor::backend::cpu::CpuBackend; }",
        "use ember_tensor::{backend::{Backend, cpu::CpuBackend}, Tensor};",
        "use ember_tensor as et; fn f() { let _ = et::backend::cpu::CpuBackend; }",
        "fn f() { ember_tensor::backend::cpu::CpuBackend::default(); }",
        "fn f() -> Option<::ember_tensor::backend::SgdStep> { None }",
        "fn f() { let v = vec![ember_tensor::backend::cpu::CpuBackend]; }",
        "use ember_tensor::backend::{Backend, View, backend_for};",
        "fn f(b: &dyn ember_tensor::backend::Backend) {}",
    ];
    for src in caught {
        let v = backend_reaches(src, false).expect("parses");
        assert!(!v.is_empty(), "not caught: {src}");
    }
    let facade = "fn f() { let _ = crate::tensor::backend::cpu::CpuBackend; }";
    assert!(!backend_reaches(facade, true).expect("parses").is_empty());
    let allowed = [
        "use ember_tensor::ops::conv::ConvGeometry; use ember_tensor::{Tensor, UnaryOp};",
        "mod backend { pub struct X; } fn f() { let _ = backend::X; }",
    ];
    for src in allowed {
        assert_eq!(backend_reaches(src, false).expect("parses"), Vec::<String>::new(), "{src}");
    }
}

#[test]
fn checker_reads_paths_in_macro_tokens() {
    let mut out = Vec::new();
    let tokens: proc_macro2::TokenStream =
        "($x:expr) => { $crate::backend::cpu::iter::GRAIN + ::std::mem::size_of::<u8>() }".parse().expect("tokens");
    token_paths(tokens, &mut out);
    let joined: Vec<String> = out.iter().map(|p| p.join("::")).collect();
    assert!(joined.contains(&"$crate::backend::cpu::iter::GRAIN".to_string()), "{joined:?}");
    assert!(joined.contains(&"std::mem::size_of".to_string()), "{joined:?}");
}

// ---------------------------------------------------------------------------------------
// Rules docs/design.md states about the sources, read from the document itself
// ---------------------------------------------------------------------------------------

/// `docs/design.md`, the document the rules below are read from.
fn design_md() -> String {
    std::fs::read_to_string(workspace().join("docs/design.md")).expect("docs/design.md is readable")
}

/// The text of design.md's section headed `title`, up to the next heading of its level or
/// higher.
fn doc_section<'a>(doc: &'a str, title: &str) -> &'a str {
    let mut lines = doc.lines().enumerate();
    let (start, level) = lines
        .find_map(|(i, l)| {
            let hashes = l.chars().take_while(|c| *c == '#').count();
            (hashes > 0 && l[hashes..].trim() == title).then_some((i, hashes))
        })
        .unwrap_or_else(|| panic!("design.md has no section `{title}`"));
    let all: Vec<&str> = doc.lines().collect();
    let end = (start + 1..all.len())
        .find(|&i| {
            let hashes = all[i].chars().take_while(|c| *c == '#').count();
            hashes > 0 && hashes <= level && all[i][hashes..].starts_with(' ')
        })
        .unwrap_or(all.len());
    let from = all[..start].iter().map(|l| l.len() + 1).sum::<usize>();
    let to = all[..end].iter().map(|l| l.len() + 1).sum::<usize>().min(doc.len());
    &doc[from..to]
}

/// The backticked words of `text`, in order.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The file names design.md gives as the autograd core's import circle: the backticked
/// names in the parentheses after "import each other in one circle" (section "The core").
fn documented_core_circle(doc: &str) -> BTreeSet<String> {
    let core = doc_section(doc, "The core");
    let marker = "import each other in one circle (";
    let at = core.find(marker).expect("\"The core\" states the circle") + marker.len();
    let list = &core[at..at + core[at..].find(')').expect("the circle's list closes")];
    backticked(list).into_iter().map(|name| format!("{name}.rs")).collect()
}

/// The files of the engine's features: the `file` column of design.md's table in "Which
/// feature plugs in where".
fn documented_feature_files(doc: &str) -> BTreeSet<String> {
    doc_section(doc, "Which feature plugs in where")
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| feature"))
        .filter_map(|l| l.split('|').nth(2))
        .flat_map(|cell| backticked(cell).into_iter().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

fn autograd_crate() -> Crate {
    let src = workspace().join("crates/autograd/src");
    Crate::build(&|f: &str| std::fs::read_to_string(src.join(f)).ok()).expect("ember-autograd parses")
}

/// Which files each file's non-test code imports (itself left out).
fn import_graph(krate: &Crate) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, r, _) in krate.edges() {
        if from != r.file {
            graph.entry(from).or_default().insert(r.file);
        }
    }
    graph
}

/// The files reachable from `start` along `graph`'s edges, `start` included.
fn reachable(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::from([start.to_string()]);
    let mut todo = vec![start.to_string()];
    while let Some(f) = todo.pop() {
        for t in graph.get(&f).into_iter().flatten() {
            if seen.insert(t.clone()) {
                todo.push(t.clone());
            }
        }
    }
    seen
}

/// The import circle `node.rs` is in: the files it reaches that reach it back.
fn core_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    let mut reversed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in graph {
        for to in tos {
            reversed.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    reachable(graph, "node.rs").intersection(&reachable(&reversed, "node.rs")).cloned().collect()
}

/// design.md, "The core": "These files import each other in one circle (`node`, `op`,
/// `var`, `backward_ctx`, `reactive`)". The circle is computed from the imports and
/// compared with the list the document gives, so that neither drifts from the other.
#[test]
fn autograd_core_circle_is_the_one_design_md_lists() {
    let krate = autograd_crate();
    let circle = core_circle(&import_graph(&krate));
    let documented = documented_core_circle(&design_md());
    assert_eq!(
        circle, documented,
        "the files that import each other with node.rs (left) differ from design.md's list in \"The core\" (right)"
    );
}

/// design.md, "The core": "nothing in the circle depends on the engine or on any
/// feature". The circle is the computed one; the features are the files of the table in
/// "Which feature plugs in where".
#[test]
fn autograd_core_circle_imports_no_engine_and_no_feature() {
    let krate = autograd_crate();
    let graph = import_graph(&krate);
    let circle = core_circle(&graph);
    let features = documented_feature_files(&design_md());
    assert!(features.len() >= 8, "read only {features:?} from design.md's feature table");
    let mut bad = Vec::new();
    for (from, r, spelled) in krate.edges() {
        let to = r.file.as_str();
        if circle.contains(&from) && (to == "engine.rs" || features.contains(to)) {
            bad.push(format!("{from} imports {to}: `{spelled}`"));
        }
    }
    bad.sort();
    bad.dedup();
    assert!(
        bad.is_empty(),
        "the autograd core circle {circle:?} depends on the engine or a feature:\n{}",
        bad.join("\n")
    );
}

/// design.md, "The core": "`node.rs`, `engine.rs` and `backward_ctx.rs` name no
/// feature": none of them imports a feature's file (the table in "Which feature plugs in
/// where") or names a feature's number in `extension::ids`.
#[test]
fn node_engine_and_backward_ctx_name_no_feature() {
    let krate = autograd_crate();
    let features = documented_feature_files(&design_md());
    let mut bad = Vec::new();
    for (from, r, spelled) in krate.edges() {
        if ["node.rs", "engine.rs", "backward_ctx.rs"].contains(&from.as_str())
            && (features.contains(&r.file) || spelled.contains("ids::"))
        {
            bad.push(format!("{from} names a feature: `{spelled}` ({})", r.file));
        }
    }
    bad.sort();
    bad.dedup();
    assert!(bad.is_empty(), "a core file names a feature:\n{}", bad.join("\n"));
}

/// The `std::sync` locks a file's non-test code names (`std::sync::Mutex`, `RwLock`), in
/// any spelling a `use` allows (`use std::sync::{Mutex}`, `use std::sync; sync::Mutex`,
/// aliases), one line each.
fn std_locks(src: &str) -> Result<Vec<String>, String> {
    let info = collect(src)?;
    let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut globs = Vec::new();
    for m in info.modules.values().filter(|m| !m.test) {
        for (name, path) in &m.imports {
            aliases.insert(name.clone(), path.clone());
        }
        globs.extend(m.globs.iter().cloned());
    }
    let expand = |segs: &[String]| expand_aliases(&aliases, segs);
    let mut out = Vec::new();
    for g in &globs {
        if expand(g) == ["std", "sync"] {
            out.push("use std::sync::*".to_string());
        }
    }
    for n in &info.named {
        if n.test || info.modules.get(&n.module).is_some_and(|m| m.test) {
            continue;
        }
        let segs: Vec<String> = n.segs.iter().filter(|s| !s.is_empty()).cloned().collect();
        let segs = expand(&segs);
        if let [s, y, lock, ..] = segs.as_slice()
            && (s == "std" || s == "core")
            && y == "sync"
            && (lock == "Mutex" || lock == "RwLock")
        {
            out.push(n.segs.join("::"));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// design.md, "Architecture": "Every lock in ember (storages, graph nodes, the generator,
/// the buffer pool, the helper threads) is a `parking_lot` lock". No non-test code of any
/// crate (sources, examples, benches) names `std::sync::Mutex` or `RwLock`.
#[test]
fn every_lock_is_a_parking_lot_lock() {
    let root = workspace().join("crates");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut bad = Vec::new();
    let mut read = 0;
    for f in &files {
        let p = f.strip_prefix(&root).unwrap_or(f).to_string_lossy().replace('\\', "/");
        if p.contains("tests/") || p.contains("target/") {
            continue;
        }
        let src = std::fs::read_to_string(f).expect("readable source");
        let locks = std_locks(&src).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        read += 1;
        bad.extend(locks.into_iter().map(|l| format!("{}: `{l}`", f.display())));
    }
    assert!(read > 100, "read only {read} files");
    assert!(bad.is_empty(), "std locks where design.md promises parking_lot ones:\n{}", bad.join("\n"));
}

#[test]
fn lock_check_sees_every_spelling_of_a_std_lock() {
    let src = r#"
        use std::sync::{Arc, Mutex as M};
        use std::sync;
        use parking_lot::RwLock;
        struct A(M<u8>, sync::RwLock<u8>, std::sync::Mutex<u8>, RwLock<u8>, Arc<u8>);
        #[cfg(test)]
        mod tests { use std::sync::RwLock; }
    "#;
    assert_eq!(std_locks(src).expect("parses"), ["std::sync::Mutex", "sync::RwLock"]);
    assert_eq!(std_locks("use std::sync::{Arc, Mutex as M}; struct A(M<u8>);").expect("parses"), ["std::sync::Mutex"]);
    assert_eq!(std_locks("use std::sync::*; struct A;").expect("parses"), ["use std::sync::*"]);
    assert!(std_locks("use parking_lot::{Mutex, RwLock}; use std::sync::Arc;").expect("parses").is_empty());
}

/// The method calls and struct expressions of a file's non-test code, by name.
#[derive(Default)]
struct Calls {
    /// `x.name(..)` calls: method names.
    methods: Vec<String>,
    /// `Name { .. }` expressions: the last segment of the struct's path.
    structs: Vec<String>,
    test: bool,
}

impl<'ast> Visit<'ast> for Calls {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match i {
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Impl(m) => &m.attrs,
            _ => &[],
        };
        let test = is_test(attrs) || attrs.iter().any(|a| a.path().is_ident("test"));
        let outer = self.test;
        self.test |= test;
        visit::visit_item(self, i);
        self.test = outer;
    }

    fn visit_expr_method_call(&mut self, c: &'ast syn::ExprMethodCall) {
        if !self.test {
            self.methods.push(c.method.to_string());
        }
        visit::visit_expr_method_call(self, c);
    }

    fn visit_expr_struct(&mut self, s: &'ast syn::ExprStruct) {
        if !self.test
            && let Some(last) = s.path.segments.last()
        {
            self.structs.push(last.ident.to_string());
        }
        visit::visit_expr_struct(self, s);
    }
}

fn calls(src: &str) -> Calls {
    let file = syn::parse_file(src).expect("the source parses");
    let mut c = Calls::default();
    c.visit_file(&file);
    c
}

/// design.md, "How creation, randomness and optimizer updates reach a backend":
/// "`Tensor::update_` and `Tensor::with_slice` are CPU-only by nature; they are for user
/// code, and ember's own crates do not use them". The other crates' library code calls
/// neither.
#[test]
fn ember_crates_do_not_use_the_host_memory_escape_hatches() {
    let mut files = Vec::new();
    for krate in UPPER_CRATES {
        rust_files(&workspace().join("crates").join(krate).join("src"), &mut files);
    }
    assert!(files.len() > 100, "read only {} files", files.len());
    let mut bad = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).expect("readable source");
        for m in calls(&src).methods {
            if m == "update_" || m == "with_slice" {
                bad.push(format!("{} calls `{m}`", f.display()));
            }
        }
    }
    assert!(bad.is_empty(), "library code uses a CPU-only escape hatch:\n{}", bad.join("\n"));
}

/// design.md, "The core": "Every node is made by `node::new_node`": no file of
/// ember-autograd but `node.rs` builds a `Node` struct itself.
#[test]
fn every_node_is_made_by_new_node() {
    let src_dir = workspace().join("crates/autograd/src");
    let mut files = Vec::new();
    rust_files(&src_dir, &mut files);
    let mut bad = Vec::new();
    for f in &files {
        if f.ends_with("node.rs") && f.parent() == Some(src_dir.as_path()) {
            continue;
        }
        let src = std::fs::read_to_string(f).expect("readable source");
        if calls(&src).structs.iter().any(|s| s == "Node") {
            bad.push(f.display().to_string());
        }
    }
    assert!(bad.is_empty(), "a `Node` built outside node::new_node:\n{}", bad.join("\n"));
}

#[test]
fn call_check_skips_test_code() {
    let c = calls(
        "fn f(t: &T) { t.update_(|x| x); let _ = Node { a: 1 }; }
         #[cfg(test)] mod tests { fn g(t: &T) { t.with_slice(); } }
         #[test] fn h(t: &T) { t.with_slice(); }",
    );
    assert_eq!(c.methods, ["update_"]);
    assert_eq!(c.structs, ["Node"]);
}

/// design.md names files by path: from the workspace root (`crates/..`, `tools/..`,
/// `docs/..`), or by a path or name that ends a file's path (`backend/cpu/conv.rs`,
/// `kernels.cu`). The how-to guides and the tables are lists of files; every one of them
/// must exist, so that the document cannot drift from the tree.
#[test]
fn every_file_design_md_names_exists() {
    let root = workspace();
    // The files at the root (README.md, BENCHMARKS.md, ...), then the trees below.
    let mut tree: Vec<String> = std::fs::read_dir(&root)
        .expect("the workspace root")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for dir in ["crates", "tools", "docs"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries.filter_map(|e| e.ok()) {
                let p = e.path();
                let rel = p.strip_prefix(&root).expect("under the root").to_string_lossy().replace('\\', "/");
                if p.is_dir() {
                    if !rel.ends_with("/target") {
                        tree.push(format!("{rel}/"));
                        stack.push(p);
                    }
                } else {
                    tree.push(rel);
                }
            }
        }
    }
    let doc = design_md();
    let file_like = |t: &str| {
        t.chars().all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
            && t.chars().any(|c| c.is_ascii_alphanumeric())
            && [".rs", ".py", ".sh", ".json", ".md", ".cu", "/"].iter().any(|e| t.ends_with(e))
            && (t.contains('/') || t.contains('.'))
    };
    let mut missing = BTreeSet::new();
    let mut checked = 0;
    for t in backticked(&doc).into_iter().filter(|t| file_like(t)) {
        checked += 1;
        let found = if t.starts_with("crates/") || t.starts_with("tools/") || t.starts_with("docs/") {
            tree.iter().any(|p| p == t)
        } else {
            tree.iter().any(|p| *p == t || p.ends_with(&format!("/{t}")))
        };
        if !found {
            missing.insert(t);
        }
    }
    assert!(checked > 100, "checked only {checked} names");
    assert!(missing.is_empty(), "design.md names files that do not exist: {missing:?}");
}

/// design.md, "Architecture" (the crate table, `ember-io`): "the two formats share their
/// little-endian helpers (`le.rs`) from below, so neither imports the other": no file of
/// the safetensors format imports `pt/`, and no file of `pt/` imports the safetensors one.
#[test]
fn the_io_formats_do_not_import_each_other() {
    let src = workspace().join("crates/io/src");
    let krate = Crate::build(&|f: &str| std::fs::read_to_string(src.join(f)).ok()).expect("ember-io parses");
    let pt = |f: &str| f.starts_with("pt/") || f == "pt.rs";
    let safetensors = |f: &str| f == "safetensors_file.rs";
    assert!(
        krate.named.keys().any(|f| pt(f)) && krate.named.keys().any(|f| safetensors(f)),
        "{:?}",
        krate.named.keys()
    );
    let bad: Vec<String> = krate
        .edges()
        .into_iter()
        .filter(|(from, r, _)| (pt(from) && safetensors(&r.file)) || (safetensors(from) && pt(&r.file)))
        .map(|(from, r, spelled)| format!("{from} imports {}: `{spelled}`", r.file))
        .collect();
    assert!(bad.is_empty(), "ember-io's formats import each other:\n{}", bad.join("\n"));
}

/// design.md, "How to add a layer": "No layer implements `set_training` or
/// `named_parameters` itself" (they follow from `Module::children`).
#[test]
fn no_layer_implements_set_training_or_named_parameters() {
    let mut files = Vec::new();
    rust_files(&workspace().join("crates/nn/src/layers"), &mut files);
    assert!(files.len() > 20, "read only {} files", files.len());
    let mut bad = Vec::new();
    for f in &files {
        let file = syn::parse_file(&std::fs::read_to_string(f).expect("readable source")).expect("parses");
        for item in &file.items {
            let syn::Item::Impl(imp) = item else { continue };
            for i in &imp.items {
                if let syn::ImplItem::Fn(m) = i
                    && ["set_training", "named_parameters"].contains(&m.sig.ident.to_string().as_str())
                {
                    bad.push(format!("{} implements `{}`", f.display(), m.sig.ident));
                }
            }
        }
    }
    assert!(bad.is_empty(), "a layer implements what the derive gives:\n{}", bad.join("\n"));
}
