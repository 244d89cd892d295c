//! JSON-lines logs: one self-contained object per line, flushed per line, so a
//! killed server leaves whole lines behind.

use std::fs::File;
use std::io::{LineWriter, Write};
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
pub struct JsonLines(Option<Arc<Mutex<LineWriter<File>>>>);

impl JsonLines {
    pub fn create(path: Option<&str>) -> std::io::Result<JsonLines> {
        match path {
            None => Ok(JsonLines(None)),
            Some(p) => Ok(JsonLines(Some(Arc::new(Mutex::new(LineWriter::new(
                File::create(p)?,
            )))))),
        }
    }

    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    pub fn write(&self, v: &serde_json::Value) {
        if let Some(w) = &self.0 {
            let mut line = v.to_string();
            line.push('\n');
            let _ = w.lock().expect("log lock").write_all(line.as_bytes());
        }
    }
}

pub use satbench_common::unix_ns;
