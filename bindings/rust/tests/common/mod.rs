//! Fixtures written by the reference tools (bindings/tests/fixtures.py,
//! run with the worktree's .venv) and checks by them.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

pub struct Entry {
    pub file: String,
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub bytes: Vec<u8>,
}

pub struct Fixtures {
    pub dir: PathBuf,
    pub tensors: Vec<Entry>,
    pub expect: Vec<Entry>,
    pub meta: Vec<(String, String, String)>,
    pub files: Vec<(String, String, usize)>,
}

impl Fixtures {
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
    pub fn tensors_of<'a>(&'a self, file: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.tensors.iter().filter(move |e| e.file == file)
    }
    pub fn tensor<'a>(&'a self, file: &'a str, name: &'a str) -> &'a Entry {
        self.tensors_of(file).find(|e| e.name == name).unwrap_or_else(|| panic!("fixture {} {}", file, name))
    }
    pub fn expected(&self, case: &str) -> &Entry {
        self.expect.iter().find(|e| e.name == case).unwrap_or_else(|| panic!("no expected case {}", case))
    }
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The Python with torch, safetensors, huggingface_hub and ckpt: $CKPT_TEST_PYTHON, else the worktree's .venv.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("CKPT_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let p = repo().join(".venv/bin/python");
    assert!(
        p.exists(),
        "these tests compare with torch/safetensors: run `make venv python-package` first, or set CKPT_TEST_PYTHON"
    );
    p
}

pub fn fixtures_script() -> PathBuf {
    repo().join("bindings/tests/fixtures.py")
}

/// Runs fixtures.py with these arguments; panics with its output on failure.
pub fn run_python(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(python()).arg(fixtures_script()).args(args).output().expect("cannot run python");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "fixtures.py {:?} failed:\n{}", args, text);
    text
}

static FIXTURES: Mutex<Option<Arc<Fixtures>>> = Mutex::new(None);

pub fn fixtures() -> Arc<Fixtures> {
    let mut guard = FIXTURES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = guard.as_ref() {
        return f.clone();
    }
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = root.join(format!("fixtures-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    run_python(&[std::ffi::OsStr::new("make"), dir.as_os_str()]);
    let f = Arc::new(parse(&dir));
    *guard = Some(f.clone());
    f
}

fn shape(s: &str) -> Vec<u64> {
    s.split(',').filter(|x| !x.is_empty()).map(|x| x.parse().unwrap()).collect()
}

fn parse(dir: &Path) -> Fixtures {
    let raw = fs::read(dir.join("expected.raw")).unwrap();
    let text = fs::read_to_string(dir.join("manifest.tsv")).unwrap();
    let mut f = Fixtures { dir: dir.to_path_buf(), tensors: vec![], expect: vec![], meta: vec![], files: vec![] };
    let bytes = |off: &str, n: &str| {
        let (o, n): (usize, usize) = (off.parse().unwrap(), n.parse().unwrap());
        raw[o..o + n].to_vec()
    };
    for line in text.lines() {
        let c: Vec<&str> = line.split('\t').collect();
        match c[0] {
            "file" => f.files.push((c[1].into(), c[2].into(), c[3].parse().unwrap())),
            "t" => f.tensors.push(Entry {
                file: c[1].into(),
                name: c[2].into(),
                dtype: c[3].into(),
                shape: shape(c[4]),
                bytes: bytes(c[5], c[6]),
            }),
            "expect" => f.expect.push(Entry {
                file: String::new(),
                name: c[1].into(),
                dtype: c[2].into(),
                shape: shape(c[3]),
                bytes: bytes(c[4], c[5]),
            }),
            "meta" => f.meta.push((c[1].into(), c[2].into(), c[3].into())),
            _ => panic!("manifest line {:?}", line),
        }
    }
    f
}

/// A fresh directory for one test's outputs.
pub fn scratch(test: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("scratch-{}-{}", std::process::id(), test));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{:02x}", x)).collect()
}

/// Writes a check spec for fixtures.py check: (name, dtype, shape, bytes) and metadata.
pub fn spec(path: &Path, tensors: &[(&str, &str, &[u64], Vec<u8>)], meta: &[(&str, &str)]) {
    let mut s = String::new();
    for (name, dtype, shape, bytes) in tensors {
        let sh: Vec<String> = shape.iter().map(|x| x.to_string()).collect();
        s += &format!("t\t{}\t{}\t{}\t{}\n", name, dtype, sh.join(","), hex(bytes));
    }
    for (k, v) in meta {
        s += &format!("meta\t{}\t{}\n", k, v);
    }
    fs::write(path, s).unwrap();
}

/// safetensors (Python) reads `checkpoint` and finds exactly `tensors` and `meta`.
pub fn safetensors_check(checkpoint: &Path, tensors: &[(&str, &str, &[u64], Vec<u8>)], meta: &[(&str, &str)]) {
    let spec_path = checkpoint.with_extension("spec.tsv");
    spec(&spec_path, tensors, meta);
    run_python(&["check".as_ref(), checkpoint.as_os_str(), spec_path.as_os_str()]);
}

/// The hostile corpus: (file, expected status name). Its files too big to
/// commit are written first (tests/generated.py).
pub fn hostile() -> Vec<(PathBuf, String)> {
    let out = Command::new(python()).arg(repo().join("tests/generated.py")).output().expect("cannot run python");
    assert!(out.status.success(), "tests/generated.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let dir = repo().join("tests/hostile");
    let text = fs::read_to_string(dir.join("manifest.json")).unwrap();
    text.lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split('"').collect();
            if parts.len() >= 4 && parts[3].starts_with("CKPT_E_") {
                Some((dir.join("corpus").join(parts[1]), parts[3].to_string()))
            } else {
                None
            }
        })
        .collect()
}

pub fn le_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
