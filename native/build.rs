//! What the core's build makes before compiling it, in OUT_DIR: its sources as it carries them
//! (`build/source.rs`) and the layouts its digest walks, from Kafka's JSON specs (`build/layouts.rs`).

#[path = "build/layouts.rs"]
mod layouts;
#[path = "build/source.rs"]
mod source;
#[path = "src/step.rs"]
mod step;

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let specs: Vec<PathBuf> = layouts::SPECS.iter().map(|s| layouts::specs_dir().join(s)).collect();
    source::write(&out, &specs);
    layouts::write(&out);
}
