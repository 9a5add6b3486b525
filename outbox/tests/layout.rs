//! The shape of the source tree, held by tests: an engine is named only in its folder and in the three files
//! that must (the list of engines, the dialect, and what recognises a driver's errors), and no source file
//! outside tests holds more than one screenful of ideas (500 lines).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether `line` names an engine: a variant of the dialect or of sea-orm's backend, or an engine's feature.
fn names_an_engine(line: &str) -> bool {
    ["Dialect::", "Backend::"]
        .iter()
        .any(|prefix| ["Sqlite", "Postgres", "MySql"].iter().any(|engine| line.contains(&format!("{prefix}{engine}"))))
        || ["feature = \"sqlite\"", "feature = \"postgres\"", "feature = \"mysql\""].iter().any(|f| line.contains(f))
}

#[test]
fn only_the_engine_folders_and_three_files_name_an_engine() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut naming: Vec<String> = files
        .iter()
        .filter(|f| {
            let rel = f.strip_prefix(&src).expect("under src");
            !["storage/sqlite", "storage/postgres", "storage/mysql"].iter().any(|engine| rel.starts_with(engine))
        })
        .filter(|f| std::fs::read_to_string(f).expect("a source file").lines().any(names_an_engine))
        .map(|f| f.strip_prefix(&src).expect("under src").display().to_string())
        .collect();
    naming.sort();
    assert_eq!(
        naming,
        ["storage/dialect.rs", "storage/mod.rs", "storage/transient.rs"],
        "an engine is named outside its folder (storage/sqlite/, storage/postgres/, storage/mysql/): move the branch \
         into the \
         engine's entry of the list (storage/engine.rs) or, for a spelling of SQL, into the dialect"
    );
}

#[test]
fn no_source_file_outside_tests_is_over_500_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root).expect("the workspace").flatten() {
        let src = krate.path().join("src");
        if krate.path().join("Cargo.toml").is_file() && src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} source files under {}", files.len(), root.display());
    let mut long: Vec<String> = files
        .iter()
        .filter(|f| {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            !f.components().any(|c| c.as_os_str() == "tests") && !name.ends_with("tests.rs")
        })
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).expect("a source file").lines().count();
            (lines > 500).then(|| format!("{} ({lines} lines)", f.strip_prefix(root).unwrap_or(f).display()))
        })
        .collect();
    long.sort();
    assert!(long.is_empty(), "source files over 500 lines, each to split by idea: {long:?}");
}
