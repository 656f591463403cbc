//! hf:// names through the Rust binding (issue 30: "wherever a path is
//! taken"), against the tests' Hub on loopback (tests/sources/hub.py,
//! started by bindings/tests/fixtures.py hub-serve).  One test in its own
//! binary: it sets HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE, which no other
//! test thread may see change.
mod common;

use ckpt::{Catalog, Status};
use common::{fixtures, fixtures_script, python};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn bytes_of(cat: &Catalog, name: &str) -> Vec<u8> {
    let t = cat.require(name).unwrap();
    let mut out = vec![0u8; t.nbytes() as usize];
    t.read_bytes(0, &mut out).unwrap();
    out
}

#[test]
fn reads_a_hub_repo_through_the_hub_cache_and_offline() {
    let fx = fixtures();
    let local = Catalog::open(fx.path("sharded")).unwrap();
    let mut server = Command::new(python())
        .arg(fixtures_script())
        .arg("hub-serve")
        .arg(fx.path("sharded"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cannot start the test Hub");
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let endpoint = line.strip_prefix("ENDPOINT ").expect("the Hub's endpoint line").trim().to_string();
    let home = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("hf-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::env::set_var("HF_ENDPOINT", &endpoint);
    std::env::set_var("HF_HOME", &home);
    for v in ["HF_TOKEN", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN_PATH"] {
        std::env::remove_var(v);
    }

    // A repo opens as its directory would: the index and its three shards,
    // each tensor's bytes those of the local files.
    let hub = Catalog::open("hf://org/tiny").unwrap();
    assert_eq!(hub.file_count(), 3);
    assert_eq!(hub.len(), local.len());
    for t in local.tensors() {
        assert_eq!(bytes_of(&hub, t.name()), bytes_of(&local, t.name()), "{}", t.name());
    }
    // Verified against the Hub's SHA-256 of each LFS file.
    let report = hub.verify_report().unwrap();
    assert_eq!(report.file_sha256, 3, "{:?}", report);
    drop(hub);

    // The files sit in huggingface_hub's cache layout.
    let repo = home.join("hub/models--org--tiny");
    let commit = std::fs::read_to_string(repo.join("refs/main")).unwrap();
    assert!(repo.join("snapshots").join(commit.trim()).join("model.safetensors.index.json").exists());

    // A gated repo without a token: the Hub's answer, and what to do.
    let e = Catalog::open("hf://org/gated").unwrap_err();
    assert_eq!(e.status(), Status::Auth, "{}", e);
    assert!(e.message().contains("gated"), "{}", e.message());

    // The Hub gone, offline: read from the cache without a request.
    drop(server.stdin.take());
    server.wait().unwrap();
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let cached = Catalog::open("hf://org/tiny").unwrap();
    for t in local.tensors() {
        assert_eq!(bytes_of(&cached, t.name()), bytes_of(&local, t.name()), "{}", t.name());
    }
    let _ = std::fs::remove_dir_all(&home);
}
