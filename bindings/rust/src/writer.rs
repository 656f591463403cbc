//! Writing: a new checkpoint — one file, its split parts, or a directory of
//! Hugging Face shards, as the library's destination rule ([`destination`])
//! says — streamed and committed atomically.
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};

use crate::catalog::{path_at, Format};
use crate::dtype::{as_bytes, Dtype, Element};
use crate::error::{Error, RawError, Result};
use crate::util::{cpath, cstring};
use crate::{sys, Catalog};

/// Where and how a [`Writer`] (or a conversion) writes.  The path says
/// what is written ([`destination`]): `x.safetensors`, `x.pt`, `x.npy`, …
/// a file of that format; `out/`, an existing directory or a name without a
/// checkpoint suffix, a directory of Hugging Face shards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriterOptions {
    /// The most bytes of tensor data per file.  A directory: shards of at
    /// most this (`model-00001-of-00003.safetensors` +
    /// `model.safetensors.index.json`, or `model.safetensors` alone when
    /// everything fits); None there means 5 GB, the hub's default.  A
    /// `x.safetensors` file: its parts beside it
    /// (`x-00001-of-00003.safetensors` + `x.safetensors.index.json`) when
    /// it does not fit; None: one file.  One-file formats (torch, npy, npz,
    /// msgpack) refuse it.
    pub max_shard_size: Option<u64>,
    /// A directory's shard file prefix; None: "model".  A file names its
    /// own parts after its stem.
    pub prefix: Option<String>,
    /// The format, when the path's suffix does not say it (DCP, or GGUF at
    /// a name without `.gguf`); it must agree with the suffix.  None: the
    /// path decides.
    pub format: Option<Format>,
    /// Replace an existing checkpoint (only once the new one is complete).
    pub overwrite: bool,
    /// Skip fsync (scratch output); renames stay atomic.
    pub no_sync: bool,
    /// Record each tensor's XXH3-64 for [`Catalog::verify`](crate::Catalog::verify).
    pub checksums: bool,
    /// Tensors declared on one storage ([`Writer::add_tensor_shared`]) whose
    /// overlapping areas no single tensor covers: false refuses them (as
    /// huggingface_hub does), true writes each as a copy of its own.
    pub copy_partial_views: bool,
    /// A conversion ([`convert`]): do not check the CRC-32 of the source's
    /// ZIP members (torch.save files, DCP files' torch.save items, .npz
    /// archives).  By default every member read whole is checked
    /// ([`Status::Checksum`](crate::Status::Checksum) before anything is
    /// published).
    pub skip_crc_check: bool,
    /// Start each range's write-back as it is written, and drop it from
    /// the page cache once on disk: the disk works while the caller goes
    /// on, and the commit's fsync finds little left (ignored with
    /// `no_sync`).
    pub write_back: bool,
}

/// Library-initialised options and the strings they point to.
pub(crate) struct RawOptions {
    pub(crate) value: Box<sys::Reserved<sys::ckpt_writer_options>>,
    _prefix: Option<CString>,
}

impl WriterOptions {
    /// The defaults: what the path names, one file for a file name.
    pub fn single_file() -> Self {
        WriterOptions::default()
    }

    /// Shards (or parts) of at most `max_shard_size` bytes.
    pub fn sharded(max_shard_size: u64) -> Self {
        WriterOptions { max_shard_size: Some(max_shard_size), ..Default::default() }
    }

    pub(crate) fn raw(&self) -> Result<RawOptions> {
        let prefix = match &self.prefix {
            Some(p) => Some(cstring(p, "prefix")?),
            None => None,
        };
        // SAFETY: zeroed storage for ckpt_writer_options_init_sized to fill.
        let mut value = Box::new(unsafe { sys::Reserved::<sys::ckpt_writer_options>::zeroed() });
        unsafe { sys::ckpt_writer_options_init_sized(&mut value.value, std::mem::size_of::<sys::ckpt_writer_options>()) };
        if let Some(m) = self.max_shard_size {
            if m == 0 {
                return Err(Error::argument(None, "max_shard_size must be positive (None writes one file)".into()));
            }
            value.value.max_shard_size = m;
        }
        if let Some(p) = &prefix {
            value.value.prefix = p.as_ptr();
        }
        value.value.overwrite = self.overwrite as i32;
        value.value.no_sync = self.no_sync as i32;
        value.value.checksums = self.checksums as i32;
        value.value.copy_partial_views = self.copy_partial_views as i32;
        value.value.skip_crc_check = self.skip_crc_check as i32;
        value.value.write_back = self.write_back as i32;
        if let Some(f) = self.format {
            value.value.format = f.raw();
        }
        Ok(RawOptions { value, _prefix: prefix })
    }
}

/// Where a tensor's bytes lie in the caller's memory (for
/// [`Writer::add_tensor_shared`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Storage {
    /// Identifies the storage (e.g. its address); 0 shares nothing.
    pub id: u64,
    /// The storage's size in bytes.
    pub nbytes: u64,
    /// The tensor's first byte in it, and one past its last (row-major).
    pub begin: u64,
    pub end: u64,
    /// The tensor's elements are dense and row-major in the storage.
    pub contiguous: bool,
}

/// What is written at a path: the library's destination rule
/// (`ckpt_destination_resolve`), the one every entry point follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Destination {
    /// The format written.
    pub format: Format,
    /// A directory (shards, DCP's files); false: a file, or its split
    /// parts beside it.
    pub directory: bool,
}

/// What [`Writer::create`] and the conversions write at `path` with these
/// options: a path ending in `/` or naming an existing directory is a
/// directory; a name ending in a suffix of [`Format::for_path`] is a file
/// of that format; another checkpoint suffix (`.ckpt`, `.h5`, `.onnx`, an
/// index, …) is refused (`Status::InvalidArgument`); any other name is a
/// directory.  Nothing is created.
pub fn destination<P: AsRef<Path>>(path: P, options: &WriterOptions) -> Result<Destination> {
    let c = cpath(path.as_ref())?;
    let opts = options.raw()?;
    let err = RawError::new();
    let (mut format, mut directory) = (0, 0);
    err.check(unsafe {
        sys::ckpt_destination_resolve(c.as_ptr(), &opts.value.value, &mut format, &mut directory, err.ptr())
    })?;
    Ok(Destination { format: Format::from_raw(format), directory: directory != 0 })
}

/// Parses a shard size as huggingface_hub does ("5GB" = 5·10⁹, "500MB"),
/// plus binary units ("2GiB") and plain byte counts.
pub fn parse_size(text: &str) -> Result<u64> {
    let c = cstring(text, "size")?;
    let mut bytes = 0u64;
    let err = RawError::new();
    err.check(unsafe { sys::ckpt_parse_size(c.as_ptr(), &mut bytes, err.ptr()) })?;
    Ok(bytes)
}

/// A streaming safetensors writer (`ckpt_writer`): declare every tensor,
/// [`begin`](Self::begin) (headers, shard layout and index are fixed, disk
/// space reserved), [`write`](Self::write) each tensor's bytes in chunks of
/// any size and in any tensor order, then [`commit`](Self::commit).  Nothing
/// appears under a final name before commit; dropping an uncommitted writer
/// removes its temporaries.
pub struct Writer {
    raw: NonNull<sys::ckpt_writer>,
    dtypes: Vec<(String, Dtype)>,
}

// SAFETY: a writer is used from one thread at a time (&mut for every call).
unsafe impl Send for Writer {}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("tensors", &self.dtypes.len()).field("files", &self.file_paths()).finish()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        unsafe { sys::ckpt_writer_free(self.raw.as_ptr()) }
    }
}

impl Writer {
    /// A writer for `path` (a file, its parts, or a directory of shards:
    /// see [`destination`]).  Fails with `Status::Exists` when a checkpoint
    /// is there and `overwrite` is off.
    pub fn create<P: AsRef<Path>>(path: P, options: &WriterOptions) -> Result<Writer> {
        let c = cpath(path.as_ref())?;
        let opts = options.raw()?;
        let err = RawError::new();
        let mut out = ptr::null_mut();
        err.check(unsafe { sys::ckpt_writer_create(c.as_ptr(), &opts.value.value, &mut out, err.ptr()) })?;
        Ok(Writer { raw: NonNull::new(out).expect("ckpt_writer_create succeeded without a writer"), dtypes: Vec::new() })
    }

    fn raw(&self) -> *mut sys::ckpt_writer {
        self.raw.as_ptr()
    }

    /// A `__metadata__` entry written into every file.
    pub fn set_metadata(&mut self, key: &str, value: &str) -> Result<()> {
        let (k, v) = (cstring(key, "metadata key")?, cstring(value, "metadata value")?);
        let err = RawError::new();
        err.check(unsafe { sys::ckpt_writer_set_metadata(self.raw(), k.as_ptr(), v.as_ptr(), err.ptr()) })
    }

    /// An entry of the checkpoint's own metadata: in the file when there is
    /// one, in the index's "metadata" when sharded (as huggingface_hub does).
    pub fn set_checkpoint_metadata(&mut self, key: &str, value: &str) -> Result<()> {
        let (k, v) = (cstring(key, "metadata key")?, cstring(value, "metadata value")?);
        let err = RawError::new();
        err.check(unsafe { sys::ckpt_writer_set_checkpoint_metadata(self.raw(), k.as_ptr(), v.as_ptr(), err.ptr()) })
    }

    /// Declares a tensor; returns its index for [`write`](Self::write).
    /// Declaration order is the order shards are packed in.
    pub fn add_tensor(&mut self, name: &str, dtype: Dtype, shape: &[u64]) -> Result<usize> {
        let c = cstring(name, "tensor name")?;
        let mut index = 0usize;
        let err = RawError::new();
        err.check(unsafe {
            sys::ckpt_writer_add_tensor(
                self.raw(),
                c.as_ptr(),
                dtype.raw(),
                shape.len() as u32,
                if shape.is_empty() { ptr::null() } else { shape.as_ptr() },
                &mut index,
                err.ptr(),
            )
        })?;
        if self.dtypes.len() <= index {
            self.dtypes.resize(index + 1, (String::new(), Dtype::U8));
        }
        self.dtypes[index] = (name.to_string(), dtype);
        Ok(index)
    }

    /// Declares a tensor together with where its bytes lie in the caller's
    /// memory, so that tensors sharing memory are written once, as
    /// huggingface_hub's `save_torch_state_dict` writes them (the others are
    /// recorded as `removed → kept`; see [`kept`](Self::kept)).
    pub fn add_tensor_shared(&mut self, name: &str, dtype: Dtype, shape: &[u64], storage: &Storage) -> Result<usize> {
        let c = cstring(name, "tensor name")?;
        let raw = sys::ckpt_tensor_storage {
            id: storage.id,
            nbytes: storage.nbytes,
            begin: storage.begin,
            end: storage.end,
            contiguous: storage.contiguous as i32,
        };
        let mut index = 0usize;
        let err = RawError::new();
        err.check(unsafe {
            sys::ckpt_writer_add_tensor_shared(
                self.raw(),
                c.as_ptr(),
                dtype.raw(),
                shape.len() as u32,
                if shape.is_empty() { ptr::null() } else { shape.as_ptr() },
                &raw,
                &mut index,
                err.ptr(),
            )
        })?;
        if self.dtypes.len() <= index {
            self.dtypes.resize(index + 1, (String::new(), Dtype::U8));
        }
        self.dtypes[index] = (name.to_string(), dtype);
        Ok(index)
    }

    /// After begin: the name of the tensor written in place of tensor
    /// `index` (deduplicated away; bytes sent for it are dropped), or None
    /// when it is written itself.
    pub fn kept(&self, index: usize) -> Option<String> {
        unsafe { crate::catalog::str_at(sys::ckpt_writer_tensor_kept(self.raw(), index)) }.map(String::from)
    }

    /// Ends declarations: lays out shards, writes headers, reserves space
    /// (a full disk fails here).  Returns the final paths of the data files.
    pub fn begin(&mut self) -> Result<Vec<PathBuf>> {
        let err = RawError::new();
        err.check(unsafe { sys::ckpt_writer_begin(self.raw(), err.ptr()) })?;
        Ok(self.file_paths())
    }

    /// The final paths of the data files (after begin).
    pub fn file_paths(&self) -> Vec<PathBuf> {
        let n = unsafe { sys::ckpt_writer_file_count(self.raw()) };
        (0..n).filter_map(|i| unsafe { path_at(sys::ckpt_writer_file_path(self.raw(), i)) }).collect()
    }

    /// The data file (index into [`file_paths`](Self::file_paths)) of tensor `index`.
    pub fn tensor_file(&self, index: usize) -> usize {
        unsafe { sys::ckpt_writer_tensor_file(self.raw(), index) }
    }

    /// Bytes of tensor data declared.
    pub fn total_bytes(&self) -> u64 {
        unsafe { sys::ckpt_writer_total_bytes(self.raw()) }
    }

    /// Appends the next elements of tensor `index`; `T` must hold its dtype.
    pub fn write<T: Element>(&mut self, index: usize, data: &[T]) -> Result<()> {
        let (name, dtype) = self
            .dtypes
            .get(index)
            .ok_or_else(|| Error::argument(None, format!("no tensor {} declared", index)))?;
        if !T::holds(*dtype) {
            return Err(Error::argument(
                Some(name),
                format!("tensor '{}' is {}: it cannot be written from [{}]", name, dtype.name(), T::NAME),
            ));
        }
        self.write_bytes(index, as_bytes(data))
    }

    /// Appends the next bytes of tensor `index` (any dtype; the writer
    /// keeps no copy).
    pub fn write_bytes(&mut self, index: usize, data: &[u8]) -> Result<()> {
        let err = RawError::new();
        err.check(unsafe {
            sys::ckpt_writer_write(self.raw(), index, data.as_ptr() as *const _, data.len(), err.ptr())
        })
    }

    /// Checks every tensor is complete, fsyncs, renames into place (index
    /// last).  Returns every path published: the data files, then the
    /// index (when sharded).
    pub fn commit(self) -> Result<Vec<PathBuf>> {
        let err = RawError::new();
        err.check(unsafe { sys::ckpt_writer_commit(self.raw(), err.ptr()) })?;
        let n = unsafe { sys::ckpt_writer_published_count(self.raw()) };
        Ok((0..n).filter_map(|i| unsafe { path_at(sys::ckpt_writer_published_path(self.raw(), i)) }).collect())
    }
}

/// Converts any checkpoint ckpt reads (safetensors, shards, torch files, …)
/// to `dst` (see [`destination`]), streamed: memory does not grow with the
/// model.
pub fn convert<S: AsRef<Path>, D: AsRef<Path>>(src: S, dst: D, options: &WriterOptions) -> Result<()> {
    Catalog::open(src)?.convert(dst, options)
}

/// Finishes a commit into directory `dir` that a crash cut short (a writer
/// killed after deciding it, leaving `dir/.ckpt-commit.json`), as
/// `ckpt recover DIR` and Python's `ckpt.recover` do; returns true when
/// there was one, false when there was nothing to finish.  Opening the
/// checkpoint never does it: [`Catalog::open`] fails with
/// [`Status::Incomplete`](crate::Status::Incomplete) until this, or the next
/// write into the directory, finishes it.
///
/// The journal is executed only when it is provably one ckpt wrote (its
/// stage a real directory inside `dir` named as ckpt names stages, only
/// checkpoint files removed or published, never through a symlink);
/// anything else fails with `Status::Incomplete` naming the journal, the
/// rule and the byte offset, and is left alone.  A directory a live writer
/// holds fails with [`Status::Locked`](crate::Status::Locked) naming its
/// pid.  `check` only checks (no lock, nothing changes): true when there
/// is a commit recovery would finish.
pub fn recover<P: AsRef<Path>>(dir: P, check: bool) -> Result<bool> {
    let dir = cpath(dir.as_ref())?;
    let flags = if check { sys::CKPT_RECOVER_CHECK } else { 0 };
    let mut found = 0;
    let err = RawError::new();
    err.check(unsafe { sys::ckpt_commit_recover(dir.as_ptr(), flags, &mut found, err.ptr()) })?;
    Ok(found != 0)
}

/// Converts `count` elements between dtypes (bit-exact with torch's `.to()`
/// for every non-NaN value); `src` and `dst` hold exactly their bytes.
pub fn cast(from: Dtype, src: &[u8], to: Dtype, dst: &mut [u8]) -> Result<()> {
    let count = from
        .nbytes(1)
        .filter(|&b| b > 0 && src.len() as u64 % b == 0)
        .map(|b| src.len() as u64 / b)
        .ok_or_else(|| Error::argument(None, format!("{} bytes are not whole {} elements", src.len(), from)))?;
    if to.nbytes(count) != Some(dst.len() as u64) {
        return Err(Error::argument(
            None,
            format!("{} {} elements need {:?} bytes of {}, not {}", count, from, to.nbytes(count), to, dst.len()),
        ));
    }
    let err = RawError::new();
    err.check(unsafe {
        sys::ckpt_cast(from.raw(), src.as_ptr() as *const _, to.raw(), dst.as_mut_ptr() as *mut _, count, err.ptr())
    })
}
