//! Safe Rust API of libckpt: read, load, write and convert the checkpoints
//! of very large models (safetensors, Hugging Face shards, PyTorch
//! `torch.save` files) with memory that does not grow with the model.
//!
//! Every format, validation rule, plan and read lives in the C library; this
//! crate only translates types and ownership.
//!
//! ```no_run
//! use ckpt::{Catalog, Dtype, LoadOptions};
//!
//! // Metadata only: names, dtypes, shapes.
//! let catalog = Catalog::open("pytorch_model.bin")?;
//! for t in catalog.tensors() {
//!     println!("{} {} {:?}", t.name(), t.dtype(), t.shape());
//! }
//! // One tensor into a typed slice (pread, no per-element work).
//! let fc = catalog.require("fc.weight")?;
//! let mut w = vec![0f32; fc.numel() as usize];
//! fc.read_into(&mut w)?;
//!
//! // A plan: select, rename, cast; loaded by parallel reads into typed Vecs.
//! let mut plan = catalog.plan()?;
//! plan.select("layer1.*")?.rename("layer1.", "block.")?.cast("*", Dtype::F32)?;
//! for t in plan.load_vecs(&LoadOptions::default())? {
//!     let values: &[f32] = t.data.as_slice().unwrap_or(&[]);
//!     println!("{} {:?} {}", t.name, t.shape, values.len());
//! }
//! # Ok::<(), ckpt::Error>(())
//! ```
//!
//! Writing is declare → begin → write chunks → commit:
//!
//! ```no_run
//! use ckpt::{Dtype, Writer, WriterOptions};
//! let mut w = Writer::create("out", &WriterOptions::sharded(ckpt::parse_size("5GB")?))?;
//! let i = w.add_tensor("embed.weight", Dtype::F32, &[1000, 64])?;
//! w.begin()?;
//! for row in vec![vec![0.5f32; 64]; 1000] {
//!     w.write(i, &row)?;
//! }
//! w.commit()?;
//! # Ok::<(), ckpt::Error>(())
//! ```
#![cfg(unix)]

#[cfg(target_endian = "big")]
compile_error!("the ckpt crate hands out little-endian data as native Rust numbers: little-endian hosts only");

pub use ckpt_sys as sys;

mod catalog;
mod dtype;
mod error;
mod plan;
mod util;
mod value;
mod writer;

pub use catalog::{Catalog, Format, IoMode, OpenOptions, Tensor, Tensors, VerifyReport};
pub use dtype::{Dtype, Element};
pub use error::{Detail, Error, Result, Status};
pub use plan::{Buffer, Expected, LoadOptions, LoadStats, Loaded, Mismatch, Plan, PlanItem, TensorData};
pub use value::{Items, Node, Pairs, Value};
pub use writer::{cast, convert, destination, parse_size, recover, Destination, Storage, Writer, WriterOptions};

/// The library's version ("MAJOR.MINOR.PATCH").
pub fn version() -> &'static str {
    let p = unsafe { sys::ckpt_version() };
    if p.is_null() {
        ""
    } else {
        unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap_or("")
    }
}
