//! Every test that docs/GUARANTEES.md (and README.md) names exists where the name says, so a
//! promise can never point at a test that was renamed or removed.
//!
//! The naming rules are the ones GUARANTEES.md states at its top: `file::name` (an
//! integration-test file of a workspace crate), `store_*::name` (a body of the store
//! conformance suite), `dq_core::module::tests::name` (a unit test in a crate's source), and
//! `ui::case_*` (compile-fail cases of the macro); a trailing `*` matches a prefix.

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root (this crate, `dq`, is at the root).
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, recursively (none when `dir` does not exist).
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found
}

/// The workspace's crate directories: the root and every directory holding a Cargo.toml.
fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![root().to_path_buf()];
    for entry in fs::read_dir(root()).unwrap().flatten() {
        let path = entry.path();
        if path.join("Cargo.toml").is_file() {
            dirs.push(path);
        }
    }
    dirs
}

/// Whether `text` holds `name` as a whole identifier (or, for `prefix*`, an identifier
/// starting with `prefix`).
fn has_word(text: &str, name: &str) -> bool {
    let (needle, prefix) = match name.strip_suffix('*') {
        Some(p) => (p, true),
        None => (name, false),
    };
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + needle.len()..].chars().next();
        !before.is_some_and(word) && (prefix || !after.is_some_and(word))
    })
}

/// Whether `ident` is `name` (or, for `prefix*`, starts with `prefix`).
fn matches(ident: &str, name: &str) -> bool {
    match name.strip_suffix('*') {
        Some(prefix) => ident.starts_with(prefix),
        None => ident == name,
    }
}

/// Whether `text` defines a function `name` (or one starting with it, for `prefix*`).
fn defines_fn(text: &str, name: &str) -> bool {
    text.match_indices("fn ").any(|(at, _)| {
        let rest = &text[at + 3..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        matches(&rest[..end], name)
    })
}

/// Checks one reference; `Err` says why it does not resolve.
fn check(reference: &str) -> Result<(), String> {
    let parts: Vec<&str> = reference.split("::").collect();
    let (first, name) = (parts[0], *parts.last().unwrap());
    match first {
        "store_*" => {
            let suite = [
                root().join("tests/common/conformance/mod.rs"),
                root().join("tests/common/conformance_inspect.rs"),
            ];
            let listed = suite
                .iter()
                .any(|f| has_word(&fs::read_to_string(f).unwrap_or_default(), name));
            listed
                .then_some(())
                .ok_or_else(|| format!("`{name}` is not in the conformance suite's list"))
        }
        "ui" => {
            let cases = rust_files(&root().join("dq-macros/tests/ui"));
            let found = cases
                .iter()
                .any(|f| matches(&f.file_stem().unwrap().to_string_lossy(), name));
            found
                .then_some(())
                .ok_or_else(|| format!("no compile-fail case `{name}`"))
        }
        _ if first.starts_with("dq_") => {
            let dir = root().join(first.replace('_', "-")).join("src");
            // The module the test lives in: the segment before `tests` (or the last module).
            let module = parts[..parts.len() - 1]
                .iter()
                .rev()
                .find(|p| **p != "tests")
                .copied()
                .unwrap_or(first);
            let files: Vec<PathBuf> = rust_files(&dir)
                .into_iter()
                .filter(|f| f.to_string_lossy().contains(module))
                .collect();
            if files.is_empty() {
                return Err(format!(
                    "no file of module `{module}` under {}",
                    dir.display()
                ));
            }
            files
                .iter()
                .any(|f| defines_fn(&fs::read_to_string(f).unwrap(), name))
                .then_some(())
                .ok_or_else(|| format!("no `fn {name}` in module `{module}`"))
        }
        file => {
            let candidates: Vec<PathBuf> = crate_dirs()
                .iter()
                .map(|d| d.join("tests").join(format!("{file}.rs")))
                .filter(|f| f.is_file())
                .collect();
            let [path] = candidates.as_slice() else {
                return Err(format!(
                    "`{file}.rs` is the name of {} test files, not one",
                    candidates.len()
                ));
            };
            if name == "*" {
                return Ok(());
            }
            let text = fs::read_to_string(path).unwrap();
            defines_fn(&text, name)
                .then_some(())
                .ok_or_else(|| format!("no `fn {name}` in {}", path.display()))
        }
    }
}

/// The test references of a document: code spans of lowercase paths (`a::b`) in the last cell
/// of its table rows, where the promise tables name their tests.
fn references(doc: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in doc.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_end_matches('|').split('|').collect();
        let last = cells.last().copied().unwrap_or_default();
        for (i, span) in last.split('`').enumerate() {
            let is_path = span.contains("::")
                && !span.starts_with("::")
                && span
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_*:".contains(c));
            if i % 2 == 1 && is_path {
                found.push(span.to_string());
            }
        }
    }
    found
}

#[test]
fn every_test_the_guarantees_name_exists() {
    let doc = fs::read_to_string(root().join("docs/GUARANTEES.md")).unwrap();
    let refs = references(&doc);
    assert!(
        refs.len() > 100,
        "docs/GUARANTEES.md names only {} tests: its tables were not read",
        refs.len()
    );
    let stale: Vec<String> = refs
        .iter()
        .filter_map(|r| check(r).err().map(|why| format!("{r}: {why}")))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/GUARANTEES.md names tests that do not exist:\n{}",
        stale.join("\n")
    );
}

#[test]
fn every_test_the_readme_names_exists() {
    let doc = fs::read_to_string(root().join("README.md")).unwrap();
    let stale: Vec<String> = references(&doc)
        .iter()
        .filter_map(|r| check(r).err().map(|why| format!("{r}: {why}")))
        .collect();
    assert!(
        stale.is_empty(),
        "README.md names tests that do not exist:\n{}",
        stale.join("\n")
    );
}

/// The checker itself: a real name passes, a misspelt one, a wrong file and a missing
/// conformance body fail.
#[test]
fn the_checker_tells_a_stale_name() {
    assert_eq!(
        check("guarantees_named::the_checker_tells_a_stale_name"),
        Ok(())
    );
    assert!(check("guarantees_named::the_checker_tells_a_stale_nam").is_err());
    assert!(check("no_such_file::the_checker_tells_a_stale_name").is_err());
    assert!(check("store_*::no_such_body").is_err());
    assert!(check("dq_core::retry::tests::no_such_test").is_err());
    assert_eq!(
        references("| a | `x::y`, `Client::new`, `z` |\n| `p::q` | b |"),
        vec!["x::y".to_string()]
    );
}
