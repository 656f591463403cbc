//! Finds libckpt and links it, in this order:
//!
//! 1. `CKPT_LIB_DIR`: a directory holding `libckpt.a` (linked statically,
//!    with the dependencies its `ckpt.pc` lists) or `libckpt.so`; the
//!    repository's `make test-bindings` points it at `build/`.
//!    `CKPT_INCLUDE_DIR` names the directory of `ckpt.h` when it is not the
//!    repository's `include/`.
//! 2. pkg-config (`pkg-config --libs --cflags ckpt-static`, else
//!    `pkg-config --static --libs --cflags ckpt`), for an installed libckpt
//!    (`make install`); `libckpt.a` is preferred when it sits beside the
//!    shared library.
//! 3. CMake, building the static library from this repository into
//!    `OUT_DIR` (`CKPT_NO_CMAKE=1` forbids it).
//!
//! `CKPT_LINK=dylib` links the shared library instead of the static one.
//! It also compiles `layout.c` (offsets of every declared field, measured
//! by the C compiler against the real header) for the layout test.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Found {
    lib_dir: PathBuf,
    include_dir: PathBuf,
    /// Other libraries libckpt needs when linked statically.
    deps: Vec<String>,
    extra_search: Vec<PathBuf>,
}

fn main() {
    for var in ["CKPT_LIB_DIR", "CKPT_INCLUDE_DIR", "CKPT_LINK", "CKPT_NO_CMAKE", "PKG_CONFIG_PATH", "CC"] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    println!("cargo:rerun-if-changed=layout.c");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let repo = manifest.join("../../..");
    let repo_include = repo.join("include");

    let found = from_env(&repo_include)
        .or_else(from_pkg_config)
        .or_else(|| from_cmake(&repo))
        .unwrap_or_else(|| {
            panic!(
                "ckpt-sys: libckpt not found. Set CKPT_LIB_DIR to the directory holding libckpt.a \
                 (the repository's build/ after `make build`), install it so that `pkg-config ckpt` \
                 finds it (`make install`), or build from the repository with cmake on PATH."
            )
        });

    let dynamic = env::var("CKPT_LINK").map(|v| v == "dylib").unwrap_or(false);
    let static_lib = found.lib_dir.join("libckpt.a");
    println!("cargo:rustc-link-search=native={}", found.lib_dir.display());
    for dir in &found.extra_search {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    if !dynamic && static_lib.is_file() {
        println!("cargo:rerun-if-changed={}", static_lib.display());
        println!("cargo:rustc-link-lib=static=ckpt");
        for dep in &found.deps {
            println!("cargo:rustc-link-lib={}", dep);
        }
    } else {
        let so = found.lib_dir.join("libckpt.so");
        println!("cargo:rerun-if-changed={}", so.display());
        println!("cargo:rustc-link-lib=dylib=ckpt");
    }
    println!("cargo:include={}", found.include_dir.display());
    println!("cargo:lib_dir={}", found.lib_dir.display());
    layout_probe(&manifest, &found.include_dir);
    statuses(&found.include_dir);
}

/// The status and detail constants, from the one table of statuses
/// (`ckpt_status.h`): `$OUT_DIR/statuses.rs`, included by src/lib.rs.  Each
/// row is `X(NAME, NUMBER, "message")` or `X(NAME, NUMBER, CATEGORY, "message")`.
fn statuses(include_dir: &Path) {
    let header = include_dir.join("ckpt_status.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let text = fs::read_to_string(&header)
        .unwrap_or_else(|e| panic!("ckpt-sys: cannot read {}: {}", header.display(), e));
    let (mut consts, mut statuses, mut details) = (String::new(), String::new(), String::new());
    for line in text.lines() {
        let at = match line.find("X(CKPT_") {
            Some(at) => at,
            None => continue,
        };
        let row = &line[at + 2..];
        let fields: Vec<&str> = row[..row.find('"').unwrap_or(row.len())].split(',').map(str::trim).collect();
        let (name, number) = (fields[0], fields[1]);
        if let Some(category) = fields.get(2).filter(|c| !c.is_empty()) {
            consts.push_str(&format!("pub const {}: ckpt_detail = {};\n", name, number));
            details.push_str(&format!("    (\"{}\", {}, {}),\n", name, name, category));
        } else {
            consts.push_str(&format!("pub const {}: ckpt_status = {};\n", name, number));
            statuses.push_str(&format!("    (\"{}\", {}),\n", name, name));
        }
    }
    let out = format!(
        "{}\n/// Every status of ckpt_status.h: (name, number).\npub const CKPT_STATUSES: &[(&str, ckpt_status)] = &[\n{}];\n\
         /// Every detail of ckpt_status.h: (name, number, its status).\npub const CKPT_DETAILS: &[(&str, ckpt_detail, ckpt_status)] = &[\n{}];\n",
        consts, statuses, details
    );
    fs::write(PathBuf::from(env::var("OUT_DIR").unwrap()).join("statuses.rs"), out).expect("ckpt-sys: writing statuses.rs");
}

fn from_env(repo_include: &Path) -> Option<Found> {
    let dir = PathBuf::from(env::var_os("CKPT_LIB_DIR")?);
    if !dir.join("libckpt.a").is_file() && !dir.join("libckpt.so").exists() {
        panic!("ckpt-sys: CKPT_LIB_DIR={} holds neither libckpt.a nor libckpt.so", dir.display());
    }
    let include_dir = env::var_os("CKPT_INCLUDE_DIR").map(PathBuf::from).unwrap_or_else(|| repo_include.to_path_buf());
    let deps = pc_private_libs(&dir.join("ckpt.pc")).unwrap_or_else(default_deps);
    Some(Found { lib_dir: dir, include_dir, deps, extra_search: Vec::new() })
}

fn default_deps() -> Vec<String> {
    let mut deps: Vec<String> = ["pthread", "m", "z", "xxhash"].iter().map(|s| s.to_string()).collect();
    if Command::new("pkg-config").args(["--exists", "liburing"]).status().map(|s| s.success()).unwrap_or(false) {
        deps.push("uring".into());
    }
    deps
}

/// The `-l` flags of a ckpt.pc's `Libs.private:` line.
fn pc_private_libs(pc: &Path) -> Option<Vec<String>> {
    let text = fs::read_to_string(pc).ok()?;
    let line = text.lines().find(|l| l.starts_with("Libs.private:"))?;
    Some(line["Libs.private:".len()..].split_whitespace().filter_map(|t| t.strip_prefix("-l")).map(String::from).collect())
}

fn from_pkg_config() -> Option<Found> {
    // ckpt-static.pc: libckpt.a with its dependencies shared, the link that
    // works where the dependencies' own static archives are missing (Debian
    // has none for libcurl's); else ckpt.pc's --static flags.
    let out = Command::new("pkg-config")
        .args(["--libs", "--cflags", "ckpt-static"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .or_else(|| Command::new("pkg-config").args(["--static", "--libs", "--cflags", "ckpt"]).output().ok())?;
    if !out.status.success() {
        return None;
    }
    let flags = String::from_utf8(out.stdout).ok()?;
    let mut search = Vec::new();
    let mut deps = Vec::new();
    let mut include_dir = None;
    for t in flags.split_whitespace() {
        if t.ends_with("/libckpt.a") {
            search.push(Path::new(t).parent()?.to_path_buf());
        } else if let Some(d) = t.strip_prefix("-L") {
            search.push(PathBuf::from(d));
        } else if let Some(l) = t.strip_prefix("-l") {
            if l != "ckpt" {
                deps.push(l.to_string());
            }
        } else if let Some(i) = t.strip_prefix("-I") {
            if include_dir.is_none() && Path::new(i).join("ckpt.h").is_file() {
                include_dir = Some(PathBuf::from(i)); // not a dependency's (libcurl's)
            }
        }
    }
    let lib_dir = search
        .iter()
        .find(|d| d.join("libckpt.a").is_file() || d.join("libckpt.so").exists())
        .cloned()
        .or_else(|| {
            let out = Command::new("pkg-config").args(["--variable=libdir", "ckpt"]).output().ok()?;
            Some(PathBuf::from(String::from_utf8(out.stdout).ok()?.trim()))
        })?;
    let include_dir = include_dir.or_else(|| {
        let out = Command::new("pkg-config").args(["--variable=includedir", "ckpt"]).output().ok()?;
        Some(PathBuf::from(String::from_utf8(out.stdout).ok()?.trim()))
    })?;
    Some(Found { lib_dir, include_dir, deps, extra_search: search })
}

fn from_cmake(repo: &Path) -> Option<Found> {
    if env::var_os("CKPT_NO_CMAKE").is_some() || !repo.join("CMakeLists.txt").is_file() {
        return None;
    }
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("libckpt-build");
    let jobs = env::var("NUM_JOBS").unwrap_or_else(|_| "2".into());
    let run = |args: &[&str]| {
        let status = Command::new("cmake").args(args).status();
        match status {
            Ok(s) if s.success() => true,
            Ok(s) => panic!("ckpt-sys: `cmake {}` failed ({})", args.join(" "), s),
            Err(e) => {
                println!("cargo:warning=ckpt-sys: cmake not runnable ({}); cannot build libckpt", e);
                false
            }
        }
    };
    let src = repo.to_str()?;
    let bin = out.to_str()?;
    if !run(&["-S", src, "-B", bin, "-DCMAKE_BUILD_TYPE=Release", "-DCKPT_BUILD_TESTS=OFF"]) {
        return None;
    }
    if !run(&["--build", bin, "--target", "ckpt_static", "-j", &jobs]) {
        return None;
    }
    for entry in walk(repo, &["src", "include"]) {
        println!("cargo:rerun-if-changed={}", entry.display());
    }
    println!("cargo:rerun-if-changed={}", repo.join("CMakeLists.txt").display());
    let deps = pc_private_libs(&out.join("ckpt.pc")).unwrap_or_else(default_deps);
    Some(Found { lib_dir: out, include_dir: repo.join("include"), deps, extra_search: Vec::new() })
}

fn walk(root: &Path, dirs: &[&str]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.iter().map(|d| root.join(d)).collect();
    while let Some(d) = stack.pop() {
        if let Ok(rd) = fs::read_dir(&d) {
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    files.push(p);
                }
            }
        }
    }
    files
}

/// Compiles layout.c against the header into a small static library.
fn layout_probe(manifest: &Path, include_dir: &Path) {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = out.join("ckpt_sys_layout.o");
    let status = Command::new(&cc)
        .args(["-std=c11", "-O2", "-fPIC", "-c"])
        .arg(format!("-I{}", include_dir.display()))
        .arg(manifest.join("layout.c"))
        .arg("-o")
        .arg(&obj)
        .status()
        .unwrap_or_else(|e| panic!("ckpt-sys: cannot run the C compiler `{}`: {}", cc, e));
    assert!(status.success(), "ckpt-sys: compiling layout.c against {} failed", include_dir.display());
    let lib = out.join("libckpt_sys_layout.a");
    let _ = fs::remove_file(&lib);
    let ar = env::var("AR").unwrap_or_else(|_| "ar".into());
    let status = Command::new(&ar).arg("crs").arg(&lib).arg(&obj).status().expect("ckpt-sys: cannot run ar");
    assert!(status.success(), "ckpt-sys: ar failed");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=ckpt_sys_layout");
    for header in ["ckpt.h", "ckpt_gguf.h", "ckpt_dcp.h"] {
        println!("cargo:rerun-if-changed={}", include_dir.join(header).display());
    }
}
