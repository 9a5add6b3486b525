//! Every page of the documentation is a doctest of this crate: a page added under docs/ without its line in
//! `src/lib.rs` would have its Rust blocks never compiled.

use std::path::{Path, PathBuf};

fn pages(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read docs") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            pages(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

#[test]
fn every_page_under_docs_is_included_as_a_doctest() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).expect("lib.rs");
    let mut found = Vec::new();
    pages(&root.join("docs"), &mut found);
    assert!(found.len() >= 20, "{} pages under docs/", found.len());
    let missing: Vec<String> = found
        .iter()
        .map(|p| p.strip_prefix(&root).expect("under the root").display().to_string())
        .filter(|rel| !lib.contains(&format!("include_str!(\"../../{rel}\")")))
        .collect();
    assert!(missing.is_empty(), "pages not compiled as doctests (add them to readme/src/lib.rs): {missing:?}");
}
