//! Imports a torch ResNet state dict (`torch.save(model.state_dict())`,
//! e.g. torchvision's resnet152) into typed `Vec`s, as a Burn importer
//! would: no Python, no pickle execution, no per-element boxing.
//!
//!     cargo run --release --example import_resnet -- resnet152.pt [--per-tensor] [--cast bf16]
//!
//! Default: one plan loaded by libckpt's engine straight into typed Vecs
//! (parallel reads, no copy).  `--per-tensor`: the simplest loop,
//! `tensor.to_vec::<f32>()` one tensor at a time.  `--cast DTYPE`: cast
//! float tensors on the way (then the float tensors come back as that dtype).
//!
//! Prints one `key value` line per figure: tensors, bytes, the f32 / i64
//! tensor counts, a checksum over every loaded byte, seconds (in all, the
//! load alone, the checksum alone), peak RSS (VmHWM) and the file's size.
use std::collections::HashMap;
use std::time::Instant;

use ckpt::{Catalog, Dtype, LoadOptions, TensorData};

/// What an importer keeps per parameter.
struct Param {
    shape: Vec<u64>,
    data: TensorData,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = match args.iter().find(|a| !a.starts_with("--") && !is_cast_value(&args, a)) {
        Some(p) => p.clone(),
        None => {
            eprintln!("usage: import_resnet PATH [--per-tensor] [--cast DTYPE]");
            std::process::exit(2);
        }
    };
    let per_tensor = args.iter().any(|a| a == "--per-tensor");
    let cast = args.iter().position(|a| a == "--cast").and_then(|i| args.get(i + 1)).map(|s| s.parse::<Dtype>());
    if let Err(e) = run(&path, per_tensor, cast.transpose().unwrap_or_else(|e| fail(e))) {
        fail(e)
    }
}

fn is_cast_value(args: &[String], a: &String) -> bool {
    args.iter().position(|x| x == "--cast").map(|i| args.get(i + 1) == Some(a)).unwrap_or(false)
}

fn fail(e: ckpt::Error) -> ! {
    eprintln!("import_resnet: {}", e);
    std::process::exit(1)
}

fn run(path: &str, per_tensor: bool, cast: Option<Dtype>) -> ckpt::Result<()> {
    let t0 = Instant::now();
    let catalog = Catalog::open(path)?;
    let mut params: HashMap<String, Param> = HashMap::with_capacity(catalog.len());
    if per_tensor {
        for t in catalog.tensors() {
            let data = match t.dtype() {
                Dtype::F32 => TensorData::F32(t.to_vec::<f32>()?),
                Dtype::I64 => TensorData::I64(t.to_vec::<i64>()?),
                Dtype::F16 => TensorData::F16(t.to_vec::<u16>()?),
                Dtype::BF16 => TensorData::BF16(t.to_vec::<u16>()?),
                Dtype::F64 => TensorData::F64(t.to_vec::<f64>()?),
                d => {
                    let mut bytes = vec![0u8; t.nbytes() as usize];
                    t.read_bytes(0, &mut bytes)?;
                    TensorData::Bytes(d, bytes)
                }
            };
            params.insert(t.name().to_string(), Param { shape: t.shape().to_vec(), data });
        }
    } else {
        let mut plan = catalog.plan()?;
        if let Some(d) = cast {
            plan.cast("*", d)?;
        }
        for t in plan.load_vecs(&LoadOptions::default())? {
            params.insert(t.name, Param { shape: t.shape, data: t.data });
        }
    }
    let loaded = t0.elapsed().as_secs_f64();
    // Touch every loaded byte, as a model would.
    let t1 = Instant::now();
    let (mut sum, mut bytes, mut f32s, mut i64s) = (0u64, 0u64, 0, 0);
    let elements: u64 = params.values().map(|p| p.shape.iter().product::<u64>()).sum();
    for p in params.values() {
        match &p.data {
            TensorData::F32(_) => f32s += 1,
            TensorData::I64(_) => i64s += 1,
            _ => {}
        }
        let b = p.data.as_bytes();
        assert_eq!(b.len() as u64 * 8, p.shape.iter().product::<u64>() * p.data.dtype().bits() as u64);
        bytes += b.len() as u64;
        let h = b.chunks(8).fold(0u64, |s, c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            s.wrapping_mul(31).wrapping_add(u64::from_le_bytes(w))
        });
        sum = sum.wrapping_add(h); // independent of the map's order
    }
    let checksum_seconds = t1.elapsed().as_secs_f64();
    let seconds = t0.elapsed().as_secs_f64();
    println!("tensors {}", params.len());
    println!("bytes {}", bytes);
    println!("elements {}", elements);
    println!("f32_tensors {}", f32s);
    println!("i64_tensors {}", i64s);
    println!("checksum {:016x}", sum);
    println!("seconds {:.3}", seconds);
    println!("load_seconds {:.3}", loaded);
    println!("checksum_seconds {:.3}", checksum_seconds);
    println!("peak_rss_bytes {}", peak_rss());
    println!("file_bytes {}", catalog.file_size(0));
    Ok(())
}

/// VmHWM of this process, in bytes.
fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}
