//! The core's sources as the module carries them (`SOURCE`): every `src/**/*.rs` but the tests'
//! (`src/tests/`), in the order of their paths under `src/` ('/'-separated), as
//! `native/__init__.py`'s `checkout_source` reads the checkout's, so a stale build is told.

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

fn main() {
    let src = Path::new("src").canonicalize().expect("src/");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let key = |p: &PathBuf| p.strip_prefix(&src).expect("under src/").to_string_lossy().replace('\\', "/");
    files.sort_by_key(key);
    let parts: Vec<String> = files.iter().map(|p| format!("include_str!({:?})", p.display().to_string())).collect();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("source.rs");
    fs::write(out, format!("concat!({})", parts.join(", "))).expect("OUT_DIR is writable");
    println!("cargo:rerun-if-changed=src");
    for p in &files {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
