//! docs/design.md's architecture table against `cargo metadata`: every package of the
//! workspace has a row, in its folder, and the row's "depends on" column names exactly the
//! package's (non-dev) dependencies, each optional one with a feature that turns it on.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").canonicalize().expect("the workspace root")
}

/// A package as `cargo metadata` describes it.
struct Package {
    folder: String,
    /// Normal dependencies, with whether each is optional.
    deps: BTreeMap<String, bool>,
    /// Feature name to what it turns on.
    features: BTreeMap<String, Vec<String>>,
}

fn packages(root: &Path) -> BTreeMap<String, Package> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let root_str = format!("{}/", root.display());
    let mut map = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let manifest = p["manifest_path"].as_str().expect("manifest_path");
        let folder = manifest.trim_start_matches(&root_str).trim_end_matches("/Cargo.toml").to_string();
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| (d["name"].as_str().expect("name").to_string(), d["optional"].as_bool().unwrap_or(false)))
            .collect();
        let features = p["features"]
            .as_object()
            .expect("features")
            .iter()
            .map(|(k, v)| {
                let on = v.as_array().expect("feature list").iter().map(|x| x.as_str().unwrap_or("").to_string());
                (k.clone(), on.collect())
            })
            .collect();
        map.insert(p["name"].as_str().expect("name").to_string(), Package { folder, deps, features });
    }
    map
}

/// A row of the table: the package, its folder and the "depends on" cell.
struct Row {
    name: String,
    folder: String,
    depends: String,
}

/// The first table of the "## Architecture" section.
fn table(design: &str) -> Vec<Row> {
    let section = design.split("\n## Architecture\n").nth(1).expect("an Architecture section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut rows = Vec::new();
    let mut seen_table = false;
    for line in section.lines() {
        if !line.starts_with('|') {
            if seen_table {
                break;
            }
            continue;
        }
        seen_table = true;
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        if cells.len() != 3 || !cells[0].starts_with('`') {
            continue;
        }
        let ticks = backticked(cells[0]);
        assert!(ticks.len() >= 2, "row {line:?}: expected `name` (`folder`, ...)");
        rows.push(Row { name: ticks[0].clone(), folder: ticks[1].clone(), depends: cells[1].to_string() });
    }
    rows
}

/// The backticked words of a cell, in order.
fn backticked(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Whether `feature` turns on the optional dependency `dep`, directly or through other
/// features of the package.
fn enables(p: &Package, feature: &str, dep: &str) -> bool {
    let mut stack = vec![feature.to_string()];
    let mut seen = BTreeSet::new();
    while let Some(f) = stack.pop() {
        if !seen.insert(f.clone()) {
            continue;
        }
        for item in p.features.get(&f).into_iter().flatten() {
            let item = item.trim_start_matches("dep:");
            let head = item.split('/').next().unwrap_or(item).trim_end_matches('?');
            if head == dep {
                return true;
            }
            if p.features.contains_key(item) {
                stack.push(item.to_string());
            }
        }
    }
    false
}

/// The feature a cell gives for `dep`: the first "feature `f`" after the dependency's name,
/// before the next dependency.
fn feature_named_for<'a>(cell: &'a str, dep: &str) -> Option<&'a str> {
    let at = cell.find(&format!("`{dep}`"))? + dep.len() + 2;
    let rest = &cell[at..];
    let rest = rest.split(['`']).collect::<Vec<_>>();
    // rest alternates text, word, text, word...: find "feature" text followed by a word.
    let mut i = 0;
    while i + 1 < rest.len() {
        let text = rest[i];
        // A separator without the word "feature" ends the dependency's description.
        if (text.contains(',') || text.contains(';')) && !text.contains("feature") {
            return None;
        }
        if text.trim_end().ends_with("feature") {
            return Some(rest[i + 1]);
        }
        i += 2;
    }
    None
}

#[test]
fn the_architecture_table_lists_every_crate_and_its_dependencies() {
    let root = workspace_root();
    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    let packages = packages(&root);
    let rows = table(&design);
    let mut problems = Vec::new();

    let listed: BTreeSet<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    for name in packages.keys() {
        if !listed.contains(name.as_str()) {
            problems.push(format!("{name}: no row in the architecture table"));
        }
    }
    for row in &rows {
        let Some(p) = packages.get(&row.name) else {
            problems.push(format!("{}: a row for a package that is not in the workspace", row.name));
            continue;
        };
        if row.folder != p.folder {
            problems.push(format!("{}: the table says folder {}, cargo says {}", row.name, row.folder, p.folder));
        }
        let words: BTreeSet<String> = backticked(&row.depends).into_iter().collect();
        for (dep, optional) in &p.deps {
            if !words.contains(dep) {
                problems.push(format!("{}: depends on {dep}, which the table does not name", row.name));
                continue;
            }
            if *optional {
                match feature_named_for(&row.depends, dep) {
                    Some(f) if enables(p, f, dep) => {}
                    Some(f) => problems.push(format!("{}: feature {f} does not turn on {dep}", row.name)),
                    None => problems.push(format!("{}: {dep} is optional; the table names no feature", row.name)),
                }
            }
        }
        for w in &words {
            if !p.deps.contains_key(w) && !p.features.contains_key(w) {
                problems
                    .push(format!("{}: the table names {w}, which is neither a dependency nor a feature", row.name));
            }
        }
    }
    assert!(problems.is_empty(), "docs/design.md's architecture table is out of date:\n{}", problems.join("\n"));
}

#[test]
fn the_checker_reads_optional_dependencies_and_their_features() {
    let cell = "`a`, `b`; `c` (feature `x`), `d` (rsmpi, feature `y`; `full` turns on all)";
    assert_eq!(backticked(cell), ["a", "b", "c", "x", "d", "y", "full"]);
    assert_eq!(feature_named_for(cell, "c"), Some("x"));
    assert_eq!(feature_named_for(cell, "d"), Some("y"));
    assert_eq!(feature_named_for(cell, "a"), None);
    let p = Package {
        folder: "crates/p".into(),
        deps: [("c".to_string(), true)].into_iter().collect(),
        features: [("full".to_string(), vec!["x".to_string()]), ("x".to_string(), vec!["dep:c".to_string()])]
            .into_iter()
            .collect(),
    };
    assert!(enables(&p, "full", "c"));
    assert!(enables(&p, "x", "c"));
    assert!(!enables(&p, "full", "d"));
}
