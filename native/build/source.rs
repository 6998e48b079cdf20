//! The core's sources as the module carries them (`SOURCE`): every `src/**/*.rs` but the tests'
//! (`src/tests/`), in the order of their paths under `src/` ('/'-separated), then the specs its
//! layouts are generated from (`layouts::SPECS`), as `native/__init__.py`'s `checkout_source`
//! reads the checkout's, so a stale build is told.

use std::fs;
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir).expect("src/ is readable").map(|e| e.expect("an entry").path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `source.rs` in OUT_DIR: the sources and `specs` (paths) as one `concat!` of their texts.
pub fn write(out_dir: &Path, specs: &[PathBuf]) {
    let src = Path::new("src").canonicalize().expect("src/");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let key = |p: &PathBuf| p.strip_prefix(&src).expect("under src/").to_string_lossy().replace('\\', "/");
    files.sort_by_key(key);
    files.extend(specs.iter().map(|p| p.canonicalize().unwrap_or_else(|e| panic!("{}: {e}", p.display()))));
    let parts: Vec<String> = files.iter().map(|p| format!("include_str!({:?})", p.display().to_string())).collect();
    fs::write(out_dir.join("source.rs"), format!("concat!({})", parts.join(", "))).expect("OUT_DIR is writable");
    println!("cargo:rerun-if-changed=src");
    for p in &files {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
